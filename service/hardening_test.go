package service

import (
	"context"
	"errors"
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
)

// A key holding "}" used to end the Redis hash tag early ("ml:{rule/}x}:..." is slot of
// "rule/"), so a client could pin every counter of a rule to one Cluster node. The tag is now a
// hash of the whole key: such keys spread over the nodes like any others.
func TestKeysWithABraceSpreadOverTheClusterLikeAnyOthers(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t)
	s := newRedisStore(t, nodes[0].Addr())
	ctx := context.Background()
	l := algorithms.Limit{Kind: algorithms.FixedWindow, Quota: 5, Window: time.Hour}
	const keys = 90
	for i := range keys {
		_, err := s.Decide(ctx, Request{Key: "plugin/rule/}" + strconv.Itoa(i) + "{x}", Limit: l, Cost: 1})
		require.NoError(t, err)
	}
	for _, n := range nodes {
		size, err := n.Do("DBSIZE")
		require.NoError(t, err)
		c, _ := strconv.Atoi(size)
		t.Logf("node %s: %d of %d keys", n.Addr(), c, keys)
		assert.Positive(t, c, "node %s holds some of the keys", n.Addr())
		assert.Less(t, c, keys, "no node holds them all")
	}
	assert.Regexp(t, `^ml:\{[0-9a-f]{16}\}:fixed_window:a\}b$`, s.Key(Request{Key: "a}b", Limit: l}))
}

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
func flood(t *testing.T, s Store, l algorithms.Limit, limit int, stop func() bool) (decided, failed int) {
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
				if _, err := s.Decide(context.Background(), Request{Key: fmt.Sprintf("flood/%08d/padding-to-look-like-a-real-key", i), Limit: l, Cost: 1}); err != nil {
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
	rs := startRedis(t, "--maxmemory", "3mb", "--maxmemory-policy", policy)
	store := newRedisStore(t, rs.Addr())
	h := newTestHandler(t, Config{Store: store, Timeout: time.Second})
	ctx := context.Background()
	l := algorithms.Limit{Kind: algorithms.FixedWindow, Quota: 3, Window: time.Hour}
	attacker := Request{Key: "attacker", Limit: l, Cost: 1}
	for i := range 4 {
		d, err := store.Decide(ctx, attacker)
		require.NoError(t, err)
		require.Equal(t, i < 3, d.Allowed, "request %d", i)
	}
	require.NoError(t, store.Ping(ctx))

	full := func() bool {
		info, _ := rs.Do("INFO", "stats")
		return infoInt(info, "evicted_keys") > 20_000 || store.health.oom.Load() > 0
	}
	decided, failed := flood(t, store, l, 100_000, full)
	t.Logf("policy %s: %d keys decided, %d refused; Redis evicted %d", policy, decided, failed, infoIntOf(t, rs, "evicted_keys"))

	for range 3 { // the attacker, with its counter exhausted before the flood
		d, err := store.Decide(ctx, attacker)
		if err != nil {
			assert.ErrorIs(t, err, ErrStoreFull, "%v", err)
			continue
		}
		assert.False(t, d.Allowed, "the exhausted client is never admitted again within its window")
	}
	err := store.Ping(ctx)
	require.ErrorIs(t, err, ErrStoreFull, "readiness reports the full store")
	code, body := serve(h, "GET", "/readyz", "")
	assert.Equal(t, http.StatusServiceUnavailable, code)
	assert.Contains(t, decodeAnswer(t, body).Error, "Redis refuses writes (OOM)")
	for i := range 1000 { // Redis frees a little memory now and then: newcomers until one is refused
		code, body = serve(h, "POST", "/v1/check", `{"descriptors":[{"key":"newcomer/`+strconv.Itoa(i)+`","algorithm":"fixed_window","quota":3,"window_ms":3600000}]}`)
		if code != http.StatusOK {
			break
		}
	}
	assert.Equal(t, http.StatusServiceUnavailable, code, body)
	assert.JSONEq(t, `{"error":"store full: Redis refuses writes for lack of memory"}`, body)
	_, metrics := serve(h, "GET", "/metrics", "")
	assert.Contains(t, metrics, `meshlimit_errors_total{kind="store_full"} 1`+"\n")
}

func infoIntOf(t *testing.T, rs *redisServer, name string) int64 {
	info, err := rs.Do("INFO")
	require.NoError(t, err)
	return infoInt(info, name)
}

// An operator who configures an evicting policy anyway is told: readiness fails while Redis
// evicts, and the evicted keys are counted.
func TestReadinessFailsAndCountsWhileRedisEvicts(t *testing.T) {
	t.Parallel()
	rs := startRedis(t, "--maxmemory", "3mb", "--maxmemory-policy", "allkeys-lru")
	store := newRedisStore(t, rs.Addr())
	h := newTestHandler(t, Config{Store: store, Timeout: time.Second})
	require.NoError(t, store.Ping(context.Background()), "ready before the flood")

	decided, _ := flood(t, store, algorithms.Limit{Kind: algorithms.FixedWindow, Quota: 3, Window: time.Hour}, 200_000,
		func() bool { return infoIntOf(t, rs, "evicted_keys") > 0 })
	evicted := infoIntOf(t, rs, "evicted_keys")
	t.Logf("%d keys decided, Redis evicted %d", decided, evicted)
	require.Positive(t, evicted)

	code, body := serve(h, "GET", "/readyz", "")
	assert.Equal(t, http.StatusServiceUnavailable, code)
	assert.Contains(t, decodeAnswer(t, body).Error, "Redis evicts keys")
	assert.Equal(t, evicted, store.Evicted())
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
	rs := startRedis(t)
	store := newRedisStore(t, rs.Addr())
	// What is tested is the round trips, not the deadline: a loaded test machine must not turn a
	// slow first check into a 503.
	h := newTestHandler(t, Config{Store: store, Timeout: 2 * time.Second})
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
	cold := newTestHandler(t, Config{Store: newRedisStore(t, rs.Addr()), Timeout: DefaultTimeout})
	failed := 0
	for i := range 1000 {
		code, _ := serve(cold, "POST", "/v1/check", `{"descriptors":[{"key":"c`+strconv.Itoa(i%50)+`","algorithm":"token_bucket","quota":1000000,"window_ms":1000}]}`)
		if code != http.StatusOK {
			failed++
		}
	}
	t.Logf("a cold replica with the default %v deadline: %d of its first 1000 checks failed", DefaultTimeout, failed)
}

// Every answer but a 200 is JSON, so that a caller's decoder never meets text.
func TestEveryErrorAnswerIsJSON(t *testing.T) {
	t.Parallel()
	h := newTestHandler(t, Config{Secret: "s"})
	for _, tc := range []struct {
		name, method, path, body string
		header                   []string
		code                     int
		allow, contains          string
	}{
		{"a bad body gets 400", "POST", "/v1/check", `{}`, []string{SecretHeader, "s"}, 400, "", "descriptors: "},
		{"a missing secret gets 401", "POST", "/v1/check", `{}`, nil, 401, "", SecretHeader},
		{"an unknown path gets 404", "GET", "/v1/chek", ``, nil, 404, "", "no such path"},
		{"a GET of the check gets 405 with Allow", "GET", "/v1/check", ``, nil, 405, "POST", "method not allowed"},
		{"a POST of the health check gets 405 with Allow", "POST", "/healthz", ``, nil, 405, "GET, HEAD", "method not allowed"},
		{"a body over 64 KiB gets 413", "POST", "/v1/check", `{"descriptors":[{"key":"` + strings.Repeat("k", 70<<10) + `"}]}`, []string{SecretHeader, "s"}, 413, "", "body: larger than 65536 bytes"},
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

// A Redis key prefix holding a brace would change the hash tag: it is refused.
func TestAKeyPrefixWithABraceIsRefused(t *testing.T) {
	_, err := NewRedisStore(RedisConfig{Addrs: []string{"127.0.0.1:1"}, KeyPrefix: "ml:{x}"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "may not hold { or }")
	assert.False(t, errors.Is(err, ErrStoreFull))
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
