package rls

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/service"
	"github.com/meshlimit/meshlimit/service/rlsconfig"
)

// counters returns every sample of the counter family name as "label=value,...": value.
func counters(t *testing.T, sm *service.Metrics, name string) map[string]float64 {
	t.Helper()
	fams, err := sm.Registry().Gather()
	require.NoError(t, err)
	out := map[string]float64{}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			var ls []string
			for _, l := range m.GetLabel() {
				ls = append(ls, l.GetName()+"="+l.GetValue())
			}
			out[strings.Join(ls, ",")] = value(m)
		}
	}
	return out
}

func value(m *dto.Metric) float64 {
	if m.GetCounter() != nil {
		return m.GetCounter().GetValue()
	}
	return m.GetGauge().GetValue()
}

func TestMetricsCountHitsPerDescriptorAndRequestsPerFront(t *testing.T) {
	sm := service.NewMetrics()
	rules := goodRules(t)
	s, err := NewServer(Config{Store: memoryStore(t), Rules: func() *rlsconfig.Config { return rules },
		Metrics: NewMetrics(sm), Now: func() time.Time { return minuteStart }})
	require.NoError(t, err)
	ctx := context.Background()
	for range 11 {
		_, err := s.ShouldRateLimit(ctx, req("example6", desc("service", "s", "user", "user-a")))
		require.NoError(t, err)
	}
	_, err = s.ShouldRateLimit(ctx, req("edge_proxy_per_ip", withHits(desc("remote_address", "50.0.0.5"), 3)))
	require.NoError(t, err)
	_, err = s.ShouldRateLimit(ctx, req("example8", desc("key1", `a"b`+"\n")))
	require.NoError(t, err)
	_, err = s.ShouldRateLimit(ctx, req("example10", desc("route", "api", "http_method", "GET", "subject_id", "1")))
	require.NoError(t, err)
	_, err = s.ShouldRateLimit(ctx, req(""))
	require.Error(t, err)

	assert.Equal(t, map[string]float64{
		"descriptor=example6.service.user_user-a,domain=example6,result=within_limit":                     10,
		"descriptor=example6.service.user_user-a,domain=example6,result=shadow_mode":                      1,
		"descriptor=edge_proxy_per_ip.remote_address_50.0.0.5,domain=edge_proxy_per_ip,result=over_limit": 3,
		"descriptor=example8.key1_a\"b\n,domain=example8,result=within_limit":                             1,
		"descriptor=example10.route_api.http_method_GET.subject_id,domain=example10,result=within_limit":  1,
	}, counters(t, sm, "meshlimit_rls_hits_total"))
	assert.Equal(t, map[string]float64{"code=OK,front=grpc": 14, "code=InvalidArgument,front=grpc": 1},
		counters(t, sm, "meshlimit_requests_total"))

	rec := httptest.NewRecorder()
	s.JSONHandler().ServeHTTP(rec, httptest.NewRequest("POST", "/json", strings.NewReader(`{"domain":"edge_proxy_per_ip","descriptors":[{"entries":[{"key":"remote_address","value":"50.0.0.5"}]}]}`)))
	assert.Equal(t, http.StatusTooManyRequests, rec.Code)
	assert.Equal(t, 1.0, counters(t, sm, "meshlimit_requests_total")["code=429,front=json"])
}

func TestReloadsAreCounted(t *testing.T) {
	sm := service.NewMetrics()
	m := NewMetrics(sm)
	m.Reloaded(nil)
	m.Reloaded(errors.New("bad file"))
	assert.Equal(t, map[string]float64{"result=ok": 1, "result=error": 1}, counters(t, sm, "meshlimit_rls_config_reloads_total"))
	assert.Equal(t, map[string]float64{"": 0}, counters(t, sm, "meshlimit_rls_config_ok"))
	m.Reloaded(nil)
	assert.Equal(t, map[string]float64{"": 1}, counters(t, sm, "meshlimit_rls_config_ok"))
}

// With detailed_metric every value a client sent became a series: 200,000 users made 184,002
// series and 19 MiB of /metrics. Now a rule keeps at most MaxLabelValues values, then counts the
// rest as "<rule path>.other": /metrics stays under 64 KiB, and every hit is still counted.
func TestTwoHundredThousandDistinctValuesKeepMetricsSmall(t *testing.T) {
	sm := service.NewMetrics()
	rules := goodRules(t)
	s, err := NewServer(Config{Store: memoryStore(t), Rules: func() *rlsconfig.Config { return rules },
		Metrics: NewMetrics(sm), Now: func() time.Time { return minuteStart }, Timeout: time.Minute})
	require.NoError(t, err)
	const users = 200_000
	for i := 0; i < users; i += DefaultMaxDescriptors {
		r := req("example8")
		for j := i; j < min(i+DefaultMaxDescriptors, users); j++ {
			r.Descriptors = append(r.Descriptors, desc("key1", fmt.Sprintf("user-%d", j)))
		}
		_, err := s.ShouldRateLimit(context.Background(), r)
		require.NoError(t, err)
	}
	hits := counters(t, sm, "meshlimit_rls_hits_total")
	total := 0.0
	for _, v := range hits {
		total += v
	}
	assert.Equal(t, MaxLabelValues+1, len(hits), "series: the first values and other")
	assert.Equal(t, float64(users-MaxLabelValues), hits["descriptor=example8.key1.other,domain=example8,result=within_limit"])
	assert.Equal(t, float64(users), total, "every hit is counted")

	h, err := service.NewHandler(service.Config{Store: memoryStore(t), Metrics: sm})
	require.NoError(t, err)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	require.Equal(t, http.StatusOK, rec.Code)
	t.Logf("/metrics after %d distinct values: %d bytes", users, rec.Body.Len())
	assert.Less(t, rec.Body.Len(), 64<<10, "/metrics bytes")
}

func TestALabelValueLongerThanTheBoundIsCountedAsOther(t *testing.T) {
	b := labelBudget{max: 2, seen: map[string]map[string]struct{}{}}
	assert.Equal(t, "r.other", b.admit("r", strings.Repeat("v", MaxLabelBytes+1)))
	assert.Equal(t, "a", b.admit("r", "a"))
	assert.Equal(t, "b", b.admit("r", "b"))
	assert.Equal(t, "r.other", b.admit("r", "c"), "past the budget")
	assert.Equal(t, "a", b.admit("r", "a"), "an admitted value stays")
	assert.Equal(t, "c", b.admit("s", "c"), "each rule has its own budget")
}

func TestTheHitsOfARequestsDescriptorsAreCountedUnderEachOnesLabels(t *testing.T) {
	rules, err := rlsconfig.Load([]rlsconfig.File{{Name: "m.yaml", Data: []byte(
		"domain: m\ndescriptors:\n  - key: a\n    rate_limit: {unit: minute, requests_per_unit: 2}\n" +
			"  - key: b\n    rate_limit: {unit: minute, requests_per_unit: 100}\n" +
			"  - key: s\n    shadow_mode: true\n    rate_limit: {unit: minute, requests_per_unit: 1}\n")}})
	require.NoError(t, err)
	cases := []struct {
		name string
		req  func() *pb.RateLimitRequest
		want map[string]float64
	}{
		{"descriptors of one rule, the last ones over", func() *pb.RateLimitRequest {
			return req("m", desc("a", "1"), desc("a", "1"), desc("a", "1"), withHits(desc("a", "1"), 4))
		}, map[string]float64{"descriptor=m.a,domain=m,result=within_limit": 2, "descriptor=m.a,domain=m,result=over_limit": 5}},
		{"descriptors of rules and results interleaved", func() *pb.RateLimitRequest {
			return req("m", desc("a", "1"), desc("b", "x"), desc("a", "2"), withHits(desc("b", "y"), 7), desc("s", "z"),
				desc("s", "z"), desc("a", "1"), desc("a", "1"), withHits(desc("b", "x"), 0), desc("c", "no rule"))
		}, map[string]float64{"descriptor=m.a,domain=m,result=within_limit": 3, "descriptor=m.a,domain=m,result=over_limit": 1,
			"descriptor=m.b,domain=m,result=within_limit": 8, "descriptor=m.s,domain=m,result=within_limit": 1,
			"descriptor=m.s,domain=m,result=shadow_mode": 1}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, store := range []service.Store{memoryStore(t), struct{ service.Store }{memoryStore(t)}} {
				sm := service.NewMetrics()
				s, err := NewServer(Config{Store: store, Rules: func() *rlsconfig.Config { return rules },
					Metrics: NewMetrics(sm), Now: func() time.Time { return minuteStart }})
				require.NoError(t, err)
				_, err = s.ShouldRateLimit(context.Background(), c.req())
				require.NoError(t, err)
				assert.Equal(t, c.want, counters(t, sm, "meshlimit_rls_hits_total"))
			}
		})
	}
}
