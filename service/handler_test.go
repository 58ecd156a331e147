package service_test

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/internal/redistest"
	"github.com/meshlimit/meshlimit/service"
	"github.com/meshlimit/meshlimit/service/memstore"
	"github.com/meshlimit/meshlimit/service/redisstore"
	"github.com/meshlimit/meshlimit/wire"
)

// newTestHandler returns the service's handler for cfg, on a memory store when cfg has none.
func newTestHandler(t testing.TB, cfg service.Config) *service.Handler {
	t.Helper()
	if cfg.Store == nil {
		cfg.Store = newMemoryStore(t)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.Timeout == 0 {
		// Tests of what the service answers must not depend on how loaded the test machine is: the
		// production deadline (10 ms) is for tests that say so.
		cfg.Timeout = time.Second
	}
	h, err := service.NewHandler(cfg)
	require.NoError(t, err)
	return h
}

// newMemoryStore returns a memory store without its background sweep, closed when the test ends.
func newMemoryStore(t testing.TB) *memstore.Store {
	s := memstore.New(memstore.Config{SweepInterval: -1})
	t.Cleanup(func() { s.Close() })
	return s
}

// newRedisStore returns a Redis store on addrs, closed when the test ends.
func newRedisStore(t testing.TB, addrs ...string) *redisstore.Store {
	t.Helper()
	s, err := redisstore.New(redisstore.Config{Addrs: addrs})
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s
}

// eachStore runs f on a memory store and on a Redis store on a real redis-server of its own.
func eachStore(t *testing.T, f func(t *testing.T, s service.Store)) {
	t.Run("memory", func(t *testing.T) { f(t, newMemoryStore(t)) })
	t.Run("redis", func(t *testing.T) {
		redistest.Require(t)
		f(t, newRedisStore(t, redistest.Start(t).Addr()))
	})
}

// serve sends one request to h and returns the status and the body.
func serve(h http.Handler, method, path, body string, header ...string) (int, string) {
	r := httptest.NewRequest(method, path, strings.NewReader(body))
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Set(header[i], header[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w.Code, w.Body.String()
}

type checkAnswer struct {
	Allowed   bool `json:"allowed"`
	Decisions []struct {
		Allowed      bool  `json:"allowed"`
		Limit        int64 `json:"limit"`
		Remaining    int64 `json:"remaining"`
		ResetMs      int64 `json:"reset_ms"`
		RetryAfterMs int64 `json:"retry_after_ms"`
		DelayMs      int64 `json:"delay_ms"`
		EffectiveMs  int64 `json:"effective_ms"`
		Skipped      bool  `json:"skipped"`
		AtUs         int64 `json:"at_us"`
	} `json:"decisions"`
	Error string `json:"error"`
}

func decodeAnswer(t *testing.T, body string) checkAnswer {
	t.Helper()
	var a checkAnswer
	dec := json.NewDecoder(strings.NewReader(body))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(&a), body)
	return a
}

func TestCheckRejectsBadInput(t *testing.T) {
	t.Parallel()
	h := newTestHandler(t, service.Config{})
	const ok = `{"key":"k","algorithm":"token_bucket","quota":10,"window_ms":1000}`
	many := `{"descriptors":[` + strings.Repeat(ok+",", 64) + ok + `]}`
	for _, tc := range []struct {
		name, body, field string
	}{
		{"an empty body", ``, "body"},
		{"not JSON", `hello`, "body"},
		{"truncated JSON", `{"descriptors":[`, "body"},
		{"an array instead of an object", `[]`, "body"},
		{"trailing data", `{"descriptors":[` + ok + `]} {}`, "body"},
		{"an unknown top-level field", `{"descriptors":[` + ok + `],"domain":"x"}`, "domain"},
		{"an unknown descriptor field", `{"descriptors":[{"key":"k","algorithm":"token_bucket","quota":10,"window_ms":1000,"unit":"s"}]}`, "unit"},
		{"no descriptors", `{"descriptors":[]}`, "descriptors"},
		{"missing descriptors", `{}`, "descriptors"},
		{"65 descriptors", many, "descriptors"},
		{"a missing key", `{"descriptors":[{"algorithm":"token_bucket","quota":10,"window_ms":1000}]}`, "descriptors[0].key"},
		{"a key too long", `{"descriptors":[{"key":"` + strings.Repeat("k", 513) + `","algorithm":"token_bucket","quota":10,"window_ms":1000}]}`, "descriptors[0].key"},
		{"a key with a control character", `{"descriptors":[{"key":"a\nb","algorithm":"token_bucket","quota":10,"window_ms":1000}]}`, "descriptors[0].key"},
		{"an unknown algorithm", `{"descriptors":[` + ok + `,{"key":"k","algorithm":"gcra","quota":10,"window_ms":1000}]}`, "descriptors[1].algorithm"},
		{"a missing algorithm", `{"descriptors":[{"key":"k","quota":10,"window_ms":1000}]}`, "descriptors[0].algorithm"},
		{"a zero quota", `{"descriptors":[{"key":"k","algorithm":"fixed_window","quota":0,"window_ms":1000}]}`, "descriptors[0].quota"},
		{"a sliding log quota above 10^4", `{"descriptors":[{"key":"k","algorithm":"sliding_log","quota":10001,"window_ms":1000}]}`, "descriptors[0].quota"},
		{"a string quota", `{"descriptors":[{"key":"k","algorithm":"fixed_window","quota":"10","window_ms":1000}]}`, "descriptors[0].quota"},
		{"a fractional quota", `{"descriptors":[{"key":"k","algorithm":"fixed_window","quota":1.5,"window_ms":1000}]}`, "descriptors[0].quota"},
		{"a zero window", `{"descriptors":[{"key":"k","algorithm":"fixed_window","quota":10,"window_ms":0}]}`, "descriptors[0].window_ms"},
		{"a window over 400 days", `{"descriptors":[{"key":"k","algorithm":"fixed_window","quota":10,"window_ms":34560000001}]}`, "descriptors[0].window_ms"},
		{"a burst on a window algorithm", `{"descriptors":[{"key":"k","algorithm":"fixed_window","quota":10,"window_ms":1000,"burst":5}]}`, "descriptors[0].burst"},
		{"a negative burst", `{"descriptors":[{"key":"k","algorithm":"token_bucket","quota":10,"window_ms":1000,"burst":-1}]}`, "descriptors[0].burst"},
		{"a bucket that refills slower than 400 days", `{"descriptors":[{"key":"k","algorithm":"token_bucket","quota":1,"window_ms":34560000000,"burst":2}]}`, "descriptors[0]"},
		{"a zero cost", `{"descriptors":[{"key":"k","algorithm":"token_bucket","quota":10,"window_ms":1000,"cost":0}]}`, "descriptors[0].cost"},
		{"client time without permission", `{"descriptors":[` + ok + `],"now_us":1}`, "now_us"},
	} {
		t.Run("refuses "+tc.name, func(t *testing.T) {
			code, body := serve(h, "POST", "/v1/check", tc.body)
			require.Equal(t, http.StatusBadRequest, code, body)
			a := decodeAnswer(t, body)
			assert.True(t, strings.HasPrefix(a.Error, tc.field+": ") || strings.Contains(a.Error, tc.field), "error %q should name %s", a.Error, tc.field)
		})
	}
	t.Run("refuses a body over 64 KiB with 413", func(t *testing.T) {
		body := `{"descriptors":[{"key":"` + strings.Repeat("k", 70<<10) + `"}]}`
		code, resp := serve(h, "POST", "/v1/check", body)
		assert.Equal(t, http.StatusRequestEntityTooLarge, code, resp)
	})
	t.Run("refuses GET with 405", func(t *testing.T) {
		code, _ := serve(h, "GET", "/v1/check", "")
		assert.Equal(t, http.StatusMethodNotAllowed, code)
	})
}

func TestCheckDecides(t *testing.T) {
	t.Parallel()
	h := newTestHandler(t, service.Config{Parse: wire.DecodeOptions{AllowClientTime: true}})
	check := func(body string) checkAnswer {
		t.Helper()
		code, resp := serve(h, "POST", "/v1/check", body)
		require.Equal(t, http.StatusOK, code, resp)
		return decodeAnswer(t, resp)
	}
	t.Run("allows within the quota and reports what is left", func(t *testing.T) {
		a := check(`{"now_us":1800000000000000,"descriptors":[{"key":"a","algorithm":"fixed_window","quota":3,"window_ms":1000,"cost":2}]}`)
		require.True(t, a.Allowed)
		require.Len(t, a.Decisions, 1)
		d := a.Decisions[0]
		assert.Equal(t, []any{true, int64(3), int64(1), int64(1000), int64(0)}, []any{d.Allowed, d.Limit, d.Remaining, d.ResetMs, d.RetryAfterMs})
	})
	t.Run("denies over the quota with 200 and a retry time", func(t *testing.T) {
		a := check(`{"now_us":1800000000250000,"descriptors":[{"key":"a","algorithm":"fixed_window","quota":3,"window_ms":1000,"cost":2}]}`)
		require.False(t, a.Allowed)
		assert.Equal(t, int64(750), a.Decisions[0].RetryAfterMs)
	})
	t.Run("reports a cost above capacity as never (-1)", func(t *testing.T) {
		a := check(`{"descriptors":[{"key":"b","algorithm":"token_bucket","quota":3,"window_ms":1000,"cost":4}]}`)
		assert.Equal(t, int64(-1), a.Decisions[0].RetryAfterMs)
	})
	t.Run("stops at the first denial and skips the rest uncharged", func(t *testing.T) {
		body := `{"now_us":1800000000000000,"descriptors":[
			{"key":"c1","algorithm":"sliding_window","quota":5,"window_ms":1000},
			{"key":"c2","algorithm":"sliding_log","quota":1,"window_ms":1000},
			{"key":"c3","algorithm":"token_bucket","quota":2,"window_ms":1000}]}`
		a := check(body)
		require.True(t, a.Allowed)
		a = check(body)
		require.False(t, a.Allowed)
		assert.True(t, a.Decisions[0].Allowed, "charged")
		assert.Equal(t, int64(3), a.Decisions[0].Remaining)
		assert.False(t, a.Decisions[1].Allowed)
		assert.False(t, a.Decisions[1].Skipped)
		assert.True(t, a.Decisions[2].Skipped)
		assert.Equal(t, int64(2), a.Decisions[2].Limit)
		a = check(`{"now_us":1800000000000000,"descriptors":[{"key":"c3","algorithm":"token_bucket","quota":2,"window_ms":1000}]}`)
		assert.Equal(t, int64(0), a.Decisions[0].Remaining, "c3 was charged once, by the first request only")
	})
	t.Run("reports the leaky bucket's delay", func(t *testing.T) {
		body := `{"now_us":1800000000000000,"descriptors":[{"key":"d","algorithm":"leaky_bucket","quota":10,"window_ms":1000,"burst":5}]}`
		check(body)
		a := check(body)
		assert.Equal(t, int64(100), a.Decisions[0].DelayMs)
	})
}

func TestCheckSecret(t *testing.T) {
	t.Parallel()
	h := newTestHandler(t, service.Config{Secret: "s3cret"})
	const body = `{"descriptors":[{"key":"k","algorithm":"token_bucket","quota":10,"window_ms":1000}]}`
	for _, tc := range []struct {
		name   string
		header []string
		want   int
	}{
		{"refuses a missing secret", nil, http.StatusUnauthorized},
		{"refuses a wrong secret", []string{wire.SecretHeader, "guess"}, http.StatusUnauthorized},
		{"refuses a prefix of the secret", []string{wire.SecretHeader, "s3cre"}, http.StatusUnauthorized},
		{"accepts the secret", []string{wire.SecretHeader, "s3cret"}, http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, resp := serve(h, "POST", "/v1/check", body, tc.header...)
			assert.Equal(t, tc.want, code, resp)
		})
	}
	code, _ := serve(h, "GET", "/healthz", "")
	assert.Equal(t, http.StatusOK, code, "health needs no secret")
}

func TestOperationalEndpoints(t *testing.T) {
	t.Parallel()
	h := newTestHandler(t, service.Config{})
	code, body := serve(h, "GET", "/healthz", "")
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, "ok\n", body)
	code, _ = serve(h, "GET", "/readyz", "")
	assert.Equal(t, http.StatusOK, code)

	serve(h, "POST", "/v1/check", `{"descriptors":[{"key":"m","algorithm":"sliding_window","quota":1,"window_ms":1000}]}`)
	serve(h, "POST", "/v1/check", `{"descriptors":[{"key":"m","algorithm":"sliding_window","quota":1,"window_ms":1000}]}`)
	serve(h, "POST", "/v1/check", `{}`)
	code, body = serve(h, "GET", "/metrics", "")
	require.Equal(t, http.StatusOK, code)
	for _, line := range []string{
		`meshlimit_checks_total{result="allowed"} 1`,
		`meshlimit_checks_total{result="denied"} 1`,
		`meshlimit_decisions_total{algorithm="sliding_window",result="allowed"} 1`,
		`meshlimit_decisions_total{algorithm="sliding_window",result="denied"} 1`,
		`meshlimit_errors_total{kind="bad_request"} 1`,
		`meshlimit_store_duration_seconds_count 2`,
		`meshlimit_store_duration_seconds_bucket{le="+Inf"} 2`,
		`meshlimit_memory_keys 1`,
		`# TYPE meshlimit_store_duration_seconds histogram`,
	} {
		assert.Contains(t, body, line+"\n")
	}
}

// With Redis killed or frozen, a check is answered 503 by its deadline, while Redis is still down
// (never a hang until it is back), and the service recovers when Redis is back.
func TestCheckWhenRedisFails(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	const timeout = 50 * time.Millisecond
	h := newTestHandler(t, service.Config{Store: newRedisStore(t, rs.Addr()), Timeout: timeout})
	const body = `{"descriptors":[{"key":"k","algorithm":"token_bucket","quota":1000000,"window_ms":1000}]}`
	// unavailable waits for a check's answer while Redis is down: a hang is a check that waits for
	// Redis to come back, and Redis comes back only after it. How long the answer takes is logged,
	// not asserted: a loaded machine, or a call that waits for the store's reconnect in flight
	// (bounded by its dial timeout, 1 s), takes longer than the deadline. The minute is a safety
	// net, not a bound the test passes by.
	unavailable := func() {
		t.Helper()
		start := time.Now()
		type answer struct {
			code int
			resp string
		}
		done := make(chan answer, 1)
		go func() {
			code, resp := serve(h, "POST", "/v1/check", body)
			done <- answer{code, resp}
		}()
		select {
		case a := <-done:
			require.Equal(t, http.StatusServiceUnavailable, a.code, a.resp)
			assert.JSONEq(t, `{"error":"store unavailable"}`, a.resp)
		case <-time.After(time.Minute):
			require.FailNow(t, "the check hangs while Redis is down")
		}
		t.Logf("503 after %v", time.Since(start).Round(100*time.Microsecond))
	}
	recovered := func() bool {
		code, _ := serve(h, "POST", "/v1/check", body)
		return code == http.StatusOK
	}
	// ready waits for /readyz: its ping, bounded by the 50 ms deadline, loads the scripts a
	// restarted Redis lost, which a loaded machine may not do in time at the first attempt.
	ready := func(what string) {
		t.Helper()
		redistest.WaitFor(t, time.Minute, what, func() bool {
			code, _ := serve(h, "GET", "/readyz", "")
			return code == http.StatusOK
		})
	}
	// The first check may meet a loaded machine: what matters is that the service answers, then that
	// a dead or frozen Redis gives 503, never a hang.
	redistest.WaitFor(t, 5*time.Second, "a first check", recovered)

	t.Run("killed", func(t *testing.T) {
		rs.Stop()
		for range 5 {
			unavailable()
		}
		code, _ := serve(h, "GET", "/readyz", "")
		assert.Equal(t, http.StatusServiceUnavailable, code)
		rs.Start()
		redistest.WaitFor(t, 5*time.Second, "recovery after restart", recovered)
		ready("ready after restart")
	})
	t.Run("frozen", func(t *testing.T) {
		rs.Signal(syscall.SIGSTOP)
		for range 3 {
			unavailable()
		}
		rs.Signal(syscall.SIGCONT)
		redistest.WaitFor(t, 5*time.Second, "recovery after resume", recovered)
	})
	_, m := serve(h, "GET", "/metrics", "")
	assert.NotContains(t, m, `meshlimit_errors_total{kind="timeout"} 0`+"\n")
}

func TestMetricsAreServedThePrometheusWay(t *testing.T) {
	m := service.NewMetrics()
	h := newTestHandler(t, service.Config{Metrics: m})
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

// The handler counts the answers of /v1/check (front "http") and /v1/resets (front "resets")
// by status code, each once; the other paths are not counted.
func TestTheHandlerCountsItsFrontsRequestsByStatus(t *testing.T) {
	h := newTestHandler(t, service.Config{Secret: "s"})
	const ok = `{"descriptors":[{"key":"k","algorithm":"token_bucket","quota":10,"window_ms":1000}]}`
	for _, r := range []struct {
		method, path, body string
		header             []string
		want               int
	}{
		{"POST", "/v1/check", ok, []string{wire.SecretHeader, "s"}, http.StatusOK},
		{"POST", "/v1/check", ok, nil, http.StatusUnauthorized},
		{"POST", "/v1/check", `{}`, []string{wire.SecretHeader, "s"}, http.StatusBadRequest},
		{"GET", "/v1/check", ``, nil, http.StatusMethodNotAllowed},
		{"POST", "/v1/check", ok, []string{wire.SecretHeader, "s"}, http.StatusOK},
		{"POST", "/v1/resets", `{"plugin":"p","since":0}`, []string{wire.SecretHeader, "s"}, http.StatusOK},
		{"GET", "/healthz", ``, nil, http.StatusOK},
	} {
		code, body := serve(h, r.method, r.path, r.body, r.header...)
		require.Equal(t, r.want, code, "%s %s: %s", r.method, r.path, body)
	}
	_, m := serve(h, "GET", "/metrics", "")
	for _, line := range []string{
		`meshlimit_requests_total{code="200",front="http"} 2`,
		`meshlimit_requests_total{code="401",front="http"} 1`,
		`meshlimit_requests_total{code="400",front="http"} 1`,
		`meshlimit_requests_total{code="405",front="http"} 1`,
		`meshlimit_requests_total{code="200",front="resets"} 1`,
		`meshlimit_request_duration_seconds_count{front="http"} 5`,
		`meshlimit_request_duration_seconds_count{front="resets"} 1`,
	} {
		assert.Contains(t, m, line+"\n")
	}
}
