package service

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMetricsAreServedThePrometheusWay(t *testing.T) {
	m := NewMetrics()
	h, err := NewHandler(Config{Store: NewMemoryStore(MemoryConfig{SweepInterval: -1}), Metrics: m})
	require.NoError(t, err)
	m.ObserveRequest("grpc", "OK", time.Millisecond)
	code, body := serve(h, "GET", "/metrics", "")
	require.Equal(t, http.StatusOK, code)
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(body))
	require.NoError(t, err, "the exposition parses")
	for _, name := range []string{
		"meshlimit_checks_total", "meshlimit_decisions_total", "meshlimit_errors_total",
		"meshlimit_store_duration_seconds", "meshlimit_memory_keys", "meshlimit_requests_total",
		"meshlimit_request_duration_seconds",
		"go_goroutines", "go_memstats_alloc_bytes", "process_cpu_seconds_total", "process_resident_memory_bytes",
	} {
		assert.Contains(t, families, name)
	}
	assert.Contains(t, body, `meshlimit_requests_total{code="OK",front="grpc"} 1`)
}

func TestTheZeroMetricsValueCounts(t *testing.T) {
	var m Metrics
	m.check(true)
	m.error(errTimeout)
	var b strings.Builder
	require.NoError(t, m.writeTo(&b, -1, -1))
	assert.Contains(t, b.String(), `meshlimit_checks_total{result="allowed"} 1`)
	assert.Contains(t, b.String(), `meshlimit_errors_total{kind="timeout"} 1`)
	assert.NotContains(t, b.String(), "meshlimit_memory_keys", "no store gauge without a store")
}

func TestInstrumentCountsOnlyItsPathByStatus(t *testing.T) {
	m := NewMetrics()
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("x-fail") != "" {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok"))
	})
	h := m.Instrument("http", "/v1/check", next)
	for _, tc := range []struct{ path, fail string }{{"/v1/check", ""}, {"/v1/check", "1"}, {"/v1/check", ""}, {"/healthz", ""}} {
		r := httptest.NewRequest("POST", tc.path, nil)
		if tc.fail != "" {
			r.Header.Set("x-fail", "1")
		}
		h.ServeHTTP(httptest.NewRecorder(), r)
	}
	var b strings.Builder
	require.NoError(t, m.writeTo(&b, -1, -1))
	assert.Contains(t, b.String(), `meshlimit_requests_total{code="200",front="http"} 2`)
	assert.Contains(t, b.String(), `meshlimit_requests_total{code="503",front="http"} 1`)
	assert.Contains(t, b.String(), `meshlimit_request_duration_seconds_count{front="http"} 3`)
}
