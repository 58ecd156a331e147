package e2e

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/internal/envoyhost"
	"github.com/meshlimit/meshlimit/internal/redistest"
	"github.com/meshlimit/meshlimit/rules"
	"github.com/meshlimit/meshlimit/service"
	"github.com/meshlimit/meshlimit/wire"
)

const adminToken = "admin-token-for-e2e"

// startAdminService runs the decision service on the Redis at addr with its admin API mounted as
// meshlimit-service mounts it, and returns its address.
func startAdminService(t *testing.T, addr string) string {
	t.Helper()
	store, err := service.NewRedisStore(service.RedisConfig{Addrs: []string{addr}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = store.Close() })
	h, err := service.NewHandler(service.Config{Store: store, Timeout: 150 * time.Millisecond})
	require.NoError(t, err)
	admin, err := service.NewAdmin(service.AdminConfig{Store: store, Token: adminToken})
	require.NoError(t, err)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, service.AdminPrefix) {
			admin.ServeHTTP(w, r)
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// adminReset resets value's key of the rule through POST /v1/admin/reset, naming it from the plugin
// configuration as meshlimit-admin does, and requires that the service held state for it.
func adminReset(t *testing.T, addr, config, rule, value string) {
	t.Helper()
	cfg, err := rules.ParseConfig([]byte(config))
	require.NoError(t, err)
	var r *rules.Rule
	for _, c := range cfg.Rules() {
		if c.Name == rule {
			r = c
		}
	}
	require.NotNil(t, r)
	set, _ := r.Limits([]byte(value))
	body := wire.AppendRequestStart(nil)
	for i, spec := range set.Limits {
		body = wire.AppendDescriptor(body, i, wire.Key{Plugin: "istio-system.meshlimit", Rule: rule, Fingerprint: spec.Fingerprint, Value: value}, spec.Limit, 1)
	}
	req, err := http.NewRequest(http.MethodPost, "http://"+addr+service.AdminPrefix+"reset", bytes.NewReader(wire.AppendRequestEnd(body)))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(out))
	var answer struct {
		Keys []struct{ Deleted bool } `json:"keys"`
	}
	require.NoError(t, json.Unmarshal(out, &answer))
	require.Len(t, answer.Keys, len(set.Limits))
	for _, k := range answer.Keys {
		require.True(t, k.Deleted, "the service held the blocked key")
	}
}

// resetConfig is a global rule of 2 requests an hour per user; fields are added to the rule.
func resetConfig(fields string) string {
	return `{"global":{"cluster":"` + serviceCluster + `","timeout":"500ms"},"rules":[{"name":"per-user","scope":"global",
		"key":[{"header":"x-user"}],"limits":[{"rate":"2/h"}]` + fields + `}]}`
}

// blockAlice spends alice's 2 requests on a, then requires that both proxies see her denied, and
// returns the longest Retry-After they gave (seconds).
func blockAlice(t *testing.T, a, b *envoyhost.Plugin) (retry int) {
	t.Helper()
	for i := range 2 {
		require.Equal(t, 200, aliceOn(t, a), "request %d is within the limit", i+1)
	}
	for _, p := range []*envoyhost.Plugin{a, b} {
		res := roundTrip(t, p.VM(0), get("api.example", "/", "192.0.2.1", [2]string{"x-user", "alice"}))
		require.Equal(t, 429, status(res), "alice is blocked at the service, seen on every proxy")
		s, _ := res.LocalReply.Headers.Get("retry-after")
		n, err := strconv.Atoi(s)
		require.NoError(t, err)
		retry = max(retry, n)
	}
	return retry
}

func aliceOn(t *testing.T, p *envoyhost.Plugin) int {
	t.Helper()
	return status(roundTrip(t, p.VM(0), get("api.example", "/", "192.0.2.1", [2]string{"x-user", "alice"})))
}

func TestAnAdminResetLetsTheNextRequestPassOnEveryProxyWhenTheRuleDoesNotCacheDenials(t *testing.T) {
	addr := startAdminService(t, redistest.Start(t).Addr())
	cfg := resetConfig(`,"cache_denials":false`)
	clock := envoyhost.NewClock(epoch)
	onClock := func(c *envoyhost.Config) { c.Clock = clock }
	a := load(t, module(t, "meshlimit"), cfg, 1, toReplica(addr), onClock)
	b := load(t, module(t, "meshlimit"), cfg, 1, toReplica(addr), onClock)
	blockAlice(t, a, b)
	for _, p := range []*envoyhost.Plugin{a, b} {
		calls := counter(p, "meshlimit.global.calls")
		require.Equal(t, 429, aliceOn(t, p))
		assert.Equal(t, calls+1, counter(p, "meshlimit.global.calls"), "a denied key asks the service every time")
		assert.Zero(t, counter(p, "meshlimit.rule.per-user.cached_denials"))
	}

	adminReset(t, addr, cfg, "per-user", "alice")
	assert.Equal(t, 200, aliceOn(t, a), "the very next request passes on the proxy that saw her denied first")
	assert.Equal(t, 200, aliceOn(t, b), "and on the other one: the reset gave her a fresh quota of 2")
	assert.Equal(t, 429, aliceOn(t, a), "the fresh quota is the limit's: a third request is denied again")
	for _, p := range []*envoyhost.Plugin{a, b} {
		assert.Zero(t, counter(p, "meshlimit.global.failures"))
	}
}

func TestWithTheDefaultCacheAnAdminResetIsSeenOnceTheCachedRetryAfterHasPassed(t *testing.T) {
	addr := startAdminService(t, redistest.Start(t).Addr())
	cfg := resetConfig(``)
	clock := envoyhost.NewClock(epoch)
	onClock := func(c *envoyhost.Config) { c.Clock = clock }
	a := load(t, module(t, "meshlimit"), cfg, 1, toReplica(addr), onClock)
	b := load(t, module(t, "meshlimit"), cfg, 1, toReplica(addr), onClock)
	retry := blockAlice(t, a, b)
	require.Greater(t, retry, 1)

	adminReset(t, addr, cfg, "per-user", "alice")
	calls := [2]int64{counter(a, "meshlimit.global.calls"), counter(b, "meshlimit.global.calls")}
	for i, p := range []*envoyhost.Plugin{a, b} {
		assert.Equal(t, 429, aliceOn(t, p), "proxy %d answers from its over-limit cache: the reset cannot reach it", i)
	}
	clock.Advance(time.Duration(retry-1) * time.Second)
	for i, p := range []*envoyhost.Plugin{a, b} {
		assert.Equal(t, 429, aliceOn(t, p), "proxy %d: a second before the cached Retry-After, still cached", i)
		assert.Equal(t, calls[i], counter(p, "meshlimit.global.calls"), "proxy %d never asked the service", i)
		assert.Equal(t, int64(2), counter(p, "meshlimit.rule.per-user.cached_denials"))
	}
	clock.Advance(time.Second)
	for i, p := range []*envoyhost.Plugin{a, b} {
		assert.Equal(t, 200, aliceOn(t, p), "proxy %d: once the cached Retry-After has passed, the service is asked and the reset is seen", i)
		assert.Equal(t, calls[i]+1, counter(p, "meshlimit.global.calls"))
	}
}

func TestADenialCachedBeforeAReloadThatTurnsTheCacheOffIsNotAnsweredAfterIt(t *testing.T) {
	addr := startAdminService(t, redistest.Start(t).Addr())
	proc, clock := envoyhost.NewProcess(), envoyhost.NewClock(epoch)
	sameEnvoy := func(c *envoyhost.Config) {
		c.Clusters = map[string]string{serviceCluster: addr}
		c.Process, c.Clock = proc, clock
	}
	before := load(t, module(t, "meshlimit"), resetConfig(``), 1, sameEnvoy)
	for range 2 {
		require.Equal(t, 200, aliceOn(t, before))
	}
	require.Equal(t, 429, aliceOn(t, before), "denied by the service, and cached in this Envoy's shared data")

	// The configuration is updated: a new plugin with cache_denials false, in the same Envoy (the
	// same shared data, the same records of the rule, whose limits did not change).
	cfg := resetConfig(`,"cache_denials":false`)
	after := load(t, module(t, "meshlimit"), cfg, 1, sameEnvoy)
	adminReset(t, addr, cfg, "per-user", "alice")
	assert.Equal(t, 429, aliceOn(t, before), "the old configuration still answers from the cache")
	assert.Equal(t, 200, aliceOn(t, after), "the new one ignores the entry cached before it and asks the service")
	assert.Zero(t, counter(after, "meshlimit.global.failures"))
}
