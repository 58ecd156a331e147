package service_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/algorithms"
	"github.com/meshlimit/meshlimit/internal/redistest"
	"github.com/meshlimit/meshlimit/service"
	"github.com/meshlimit/meshlimit/wire"
)

// shippedRedisPolicy returns the maxmemory-policy of the shipped Kubernetes Redis.
func shippedRedisPolicy(t *testing.T) string {
	data, err := os.ReadFile("../envoy/istio/redis.yaml")
	require.NoError(t, err)
	m := regexp.MustCompile(`"--maxmemory-policy", "([a-z-]+)"`).FindSubmatch(data)
	require.NotNil(t, m, "envoy/istio/redis.yaml sets --maxmemory-policy")
	return string(m[1])
}

// flood decides distinct new keys under l, 8 at a time, until stop reports true (checked
// every 500 keys) or limit keys were decided. It returns the number decided and the errors.
func flood(t *testing.T, s service.Store, l algorithms.Limit, limit int, stop func() bool) (decided, failed int) {
	var next, errs atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1)
				if i > int64(limit) || (i%500 == 0 && stop()) {
					return
				}
				if _, err := s.Decide(context.Background(), service.Request{Key: fmt.Sprintf("flood/%08d/padding-to-look-like-a-real-key", i), Limit: l, Cost: 1}); err != nil {
					errs.Add(1)
					if errs.Load() > 100 {
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	return int(min(next.Load(), int64(limit))), int(errs.Load())
}

// With the shipped Redis memory policy, a flood of distinct keys that fills Redis never hands
// an exhausted client a fresh quota: under the old volatile-ttl its counter was evicted (and
// it was admitted again); under noeviction Redis refuses writes, the service says so (503
// store_full, /readyz), and the client stays denied.
func TestAFloodOfNewKeysCannotResetAnExhaustedCounter(t *testing.T) {
	t.Parallel()
	policy := shippedRedisPolicy(t)
	rs := redistest.Start(t, "--maxmemory", "3mb", "--maxmemory-policy", policy)
	store := newRedisStore(t, rs.Addr())
	h := newTestHandler(t, service.Config{Store: store, Timeout: time.Second})
	ctx := context.Background()
	l := algorithms.Limit{Kind: algorithms.FixedWindow, Quota: 3, Window: time.Hour}
	// One decision time for the attacker: the hour's window cannot turn during the flood.
	attacker := service.Request{Key: "attacker", Limit: l, Cost: 1, Now: time.Now()}
	for i := range 4 {
		d, err := store.Decide(ctx, attacker)
		require.NoError(t, err)
		require.Equal(t, i < 3, d.Allowed, "request %d", i)
	}
	require.NoError(t, store.Ping(ctx))

	full := func() bool { // Redis evicts, or refused a write for lack of memory
		return infoIntOf(t, rs, "evicted_keys") > 20_000 || strings.Contains(infoOf(t, rs, "errorstats"), "errorstat_OOM:")
	}
	decided, failed := flood(t, store, l, 100_000, full)
	t.Logf("policy %s: %d keys decided, %d refused; Redis evicted %d", policy, decided, failed, infoIntOf(t, rs, "evicted_keys"))

	for range 3 { // the attacker, with its counter exhausted before the flood
		d, err := store.Decide(ctx, attacker)
		if err != nil {
			assert.ErrorIs(t, err, service.ErrStoreFull, "%v", err)
			continue
		}
		assert.False(t, d.Allowed, "the exhausted client is never admitted again within its window")
	}
	// Each probe below follows a refused write: once the flood stops, used_memory may sit a few
	// KB either side of maxmemory (client buffers), so that is not what readiness is tested on.
	code, body := serve(h, "GET", "/readyz", "")
	assert.Equal(t, http.StatusOK, code, "a full store is shared by every replica: they stay ready")
	assert.Contains(t, body, "store full")
	for i := range 1000 { // Redis frees a little memory now and then: newcomers until one is refused
		code, body = serve(h, "POST", "/v1/check", `{"descriptors":[{"key":"newcomer/`+strconv.Itoa(i)+`","algorithm":"fixed_window","quota":3,"window_ms":3600000}]}`)
		if code != http.StatusOK {
			break
		}
	}
	assert.Equal(t, http.StatusServiceUnavailable, code, body)
	assert.JSONEq(t, `{"error":"store full: Redis refuses writes for lack of memory"}`, body)
	err := store.Ping(ctx)
	require.ErrorIs(t, err, service.ErrStoreFull, "readiness reports the full store")
	_, metrics := serve(h, "GET", "/metrics", "")
	assert.Contains(t, metrics, `meshlimit_errors_total{kind="store_full"} 1`+"\n")
}

// infoOf returns the section of redis-server's INFO (all of it, without a section).
func infoOf(t *testing.T, rs *redistest.Server, section ...string) string {
	info, err := rs.Do(append([]string{"INFO"}, section...)...)
	require.NoError(t, err)
	return info
}

// infoIntOf returns the integer field name of redis-server's INFO, or 0.
func infoIntOf(t *testing.T, rs *redistest.Server, name string) int64 {
	info := infoOf(t, rs)
	i := strings.Index(info, "\n"+name+":")
	if i < 0 {
		return 0
	}
	v, _, _ := strings.Cut(info[i+len(name)+2:], "\r")
	n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	return n
}

// An operator who configures an evicting policy anyway is told: readiness fails while Redis
// evicts, and the evicted keys are counted.
func TestReadinessFailsAndCountsWhileRedisEvicts(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t, "--maxmemory", "3mb", "--maxmemory-policy", "allkeys-lru")
	store := newRedisStore(t, rs.Addr())
	h := newTestHandler(t, service.Config{Store: store, Timeout: time.Second})
	require.NoError(t, store.Ping(context.Background()), "ready before the flood")

	decided, _ := flood(t, store, algorithms.Limit{Kind: algorithms.FixedWindow, Quota: 3, Window: time.Hour}, 200_000,
		func() bool { return infoIntOf(t, rs, "evicted_keys") > 0 })
	evicted := infoIntOf(t, rs, "evicted_keys")
	t.Logf("%d keys decided, Redis evicted %d", decided, evicted)
	require.Positive(t, evicted)

	code, body := serve(h, "GET", "/readyz", "")
	assert.Equal(t, http.StatusServiceUnavailable, code)
	assert.Contains(t, decodeAnswer(t, body).Error, "Redis evicts keys")
	assert.Equal(t, evicted, store.Stats().Evicted)
	_, metrics := serve(h, "GET", "/metrics", "")
	assert.Contains(t, metrics, "meshlimit_store_evicted_keys_total "+strconv.FormatInt(evicted, 10)+"\n")
	code, _ = serve(h, "GET", "/readyz", "")
	assert.Equal(t, http.StatusOK, code, "ready again once Redis stops evicting")
}

// A new replica used to send its first check of each algorithm with EVALSHA, get NOSCRIPT and
// send the whole script again: two round trips, which under load passed the deadline (503s on
// a cold replica). The store now loads the scripts when it starts, and readiness reloads them
// after a Redis restart, so no check ever meets NOSCRIPT.
func TestAColdReplicaChecksWithoutAScriptReload(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	store := newRedisStore(t, rs.Addr())
	// What is tested is the round trips, not the deadline: a loaded test machine must not turn a
	// slow first check into a 503.
	h := newTestHandler(t, service.Config{Store: store, Timeout: 2 * time.Second})
	checkEveryKind := func() {
		for _, k := range algorithms.Kinds {
			body := `{"descriptors":[{"key":"cold","algorithm":"` + k.String() + `","quota":10000,"window_ms":1000}]}`
			code, resp := serve(h, "POST", "/v1/check", body)
			require.Equal(t, http.StatusOK, code, resp)
		}
	}
	noReload := func(when string) {
		errs, err := rs.Do("INFO", "errorstats")
		require.NoError(t, err)
		assert.NotContains(t, errs, "NOSCRIPT", when)
		cmds, err := rs.Do("INFO", "commandstats")
		require.NoError(t, err)
		assert.NotContains(t, cmds, "cmdstat_eval:", "%s: only EVALSHA", when)
		assert.Contains(t, cmds, "cmdstat_evalsha:calls="+strconv.Itoa(len(algorithms.Kinds))+",", when)
	}
	checkEveryKind()
	noReload("the first checks of a new replica")

	_, err := rs.Do("SCRIPT", "FLUSH") // what a Redis restart does to the scripts
	require.NoError(t, err)
	_, err = rs.Do("CONFIG", "RESETSTAT")
	require.NoError(t, err)
	code, _ := serve(h, "GET", "/readyz", "")
	require.Equal(t, http.StatusOK, code)
	checkEveryKind()
	noReload("the first checks after Redis lost its scripts")

	// The figure the deadline is chosen for: 503s among a cold replica's first checks.
	cold := newTestHandler(t, service.Config{Store: newRedisStore(t, rs.Addr()), Timeout: service.DefaultTimeout})
	failed := 0
	for i := range 1000 {
		code, _ := serve(cold, "POST", "/v1/check", `{"descriptors":[{"key":"c`+strconv.Itoa(i%50)+`","algorithm":"token_bucket","quota":1000000,"window_ms":1000}]}`)
		if code != http.StatusOK {
			failed++
		}
	}
	t.Logf("a cold replica with the default %v deadline: %d of its first 1000 checks failed", service.DefaultTimeout, failed)
}

// Every answer but a 200 is JSON, so that a caller's decoder never meets text.
func TestEveryErrorAnswerIsJSON(t *testing.T) {
	t.Parallel()
	h := newTestHandler(t, service.Config{Secret: "s"})
	for _, tc := range []struct {
		name, method, path, body string
		header                   []string
		code                     int
		allow, contains          string
	}{
		{"a bad body gets 400", "POST", "/v1/check", `{}`, []string{wire.SecretHeader, "s"}, 400, "", "descriptors: "},
		{"a missing secret gets 401", "POST", "/v1/check", `{}`, nil, 401, "", wire.SecretHeader},
		{"an unknown path gets 404", "GET", "/v1/chek", ``, nil, 404, "", "no such path"},
		{"a GET of the check gets 405 with Allow", "GET", "/v1/check", ``, nil, 405, "POST", "method not allowed"},
		{"a POST of the health check gets 405 with Allow", "POST", "/healthz", ``, nil, 405, "GET, HEAD", "method not allowed"},
		{"a body over 64 KiB gets 413", "POST", "/v1/check", `{"descriptors":[{"key":"` + strings.Repeat("k", 70<<10) + `"}]}`, []string{wire.SecretHeader, "s"}, 413, "", "body: larger than 65536 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRequest(tc.method, tc.path, tc.body, tc.header...)
			w := recordResponse(h, r)
			assert.Equal(t, tc.code, w.Code)
			assert.Equal(t, "application/json", w.Header().Get("Content-Type"))
			assert.Equal(t, tc.allow, w.Header().Get("Allow"))
			assert.Contains(t, decodeAnswer(t, w.Body.String()).Error, tc.contains)
		})
	}
}

func newRequest(method, path, body string, header ...string) *http.Request {
	r := httptest.NewRequest(method, path, strings.NewReader(body))
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Set(header[i], header[i+1])
	}
	return r
}

func recordResponse(h http.Handler, r *http.Request) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}
