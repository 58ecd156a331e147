package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
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
	"github.com/meshlimit/meshlimit/service/redisstore"
	"github.com/meshlimit/meshlimit/wire"
)

const adminToken = "admin-token-for-e2e"

// startAdminService runs the decision service on the Redis at addr with its admin API mounted as
// meshlimit-service mounts it, and returns its address.
func startAdminService(t *testing.T, addr string) string {
	t.Helper()
	store, err := redisstore.New(redisstore.Config{Addrs: []string{addr}, DialTimeout: testDialTimeout})
	require.NoError(t, err)
	t.Cleanup(func() { _ = store.Close() })
	h, err := service.NewHandler(service.Config{Store: store, AdminToken: adminToken, Timeout: 10 * time.Second}) // as startRedisService
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// adminReset resets value's key of the rule through POST /v1/admin/reset, naming it from the plugin
// configuration as meshlimit-admin does, and requires that the service held state for it.
func adminReset(t *testing.T, addr, config, rule, value string) {
	t.Helper()
	for _, deleted := range adminResetKeys(t, addr, config, rule, value) {
		require.True(t, deleted, "the service held the blocked key")
	}
}

// adminResetKeys resets value's key of the rule as adminReset does, and returns whether the service
// held state for each of its limits (it holds none for a local rule, whose state is in the proxies).
func adminResetKeys(t *testing.T, addr, config, rule, value string) []bool {
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
	deleted := make([]bool, len(answer.Keys))
	for i, k := range answer.Keys {
		deleted[i] = k.Deleted
	}
	return deleted
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

func TestWithTheDefaultCacheAnAdminResetIsSeenOnEveryProxyAtItsNextResetPoll(t *testing.T) {
	addr := startAdminService(t, redistest.Start(t).Addr())
	cfg := strings.Replace(resetConfig(``), `"timeout":"500ms"`, `"timeout":"500ms","reset_poll":"200ms"`, 1)
	clock := envoyhost.NewClock(epoch)
	onClock := func(c *envoyhost.Config) { c.Clock = clock }
	a := load(t, module(t, "meshlimit"), cfg, 1, toReplica(addr), onClock)
	b := load(t, module(t, "meshlimit"), cfg, 1, toReplica(addr), onClock)
	tickAndWait(t, clock, 20*time.Millisecond, a, b) // the first poll: each proxy takes the log's position
	retry := blockAlice(t, a, b)
	require.Greater(t, retry, 1)

	adminReset(t, addr, cfg, "per-user", "alice")
	calls := [2]int64{counter(a, "meshlimit.global.calls"), counter(b, "meshlimit.global.calls")}
	for i, p := range []*envoyhost.Plugin{a, b} {
		assert.Equal(t, 429, aliceOn(t, p), "proxy %d answers from its over-limit cache until it reads the reset log", i)
		assert.Equal(t, calls[i], counter(p, "meshlimit.global.calls"), "proxy %d did not ask the service", i)
	}
	tickAndWait(t, clock, resetPollTest, a, b)
	for i, p := range []*envoyhost.Plugin{a, b} {
		assert.Equal(t, 200, aliceOn(t, p), "proxy %d: the cached denial is forgotten, the service is asked and the reset is seen", i)
		assert.Equal(t, calls[i]+1, counter(p, "meshlimit.global.calls"))
		assert.Equal(t, int64(1), counter(p, "meshlimit.global.resets_applied"))
	}
	assert.Equal(t, 429, aliceOn(t, a), "the fresh quota of 2 is spent: denied again")
}

// loginResetConfig is a global service polled every resetPollTest and the login rule counting
// failed logins (401) per client address, with the given fields (e.g. its scope).
func loginResetConfig(fields string) string {
	return `{"global":{"cluster":"` + serviceCluster + `","timeout":"500ms","reset_poll":"200ms"},"rules":[` +
		fmt.Sprintf(loginRule, fields) + `]}`
}

// twoProxies loads config on two proxies (their own shared data each) of one decision service at
// addr, on one clock, and lets each take the reset log's position.
func twoProxies(t *testing.T, addr, config string) (a, b *envoyhost.Plugin, clock *envoyhost.Clock) {
	t.Helper()
	clock = envoyhost.NewClock(epoch)
	onClock := func(c *envoyhost.Config) { c.Clock = clock }
	a = load(t, module(t, "meshlimit"), config, 2, toReplica(addr), onClock)
	b = load(t, module(t, "meshlimit"), config, 2, toReplica(addr), onClock)
	tickAndWait(t, clock, 20*time.Millisecond, a, b)
	// The first poll takes the position: a reset appended before a proxy has it is behind it,
	// never applied there. A poll that failed is retried a period later: wait for the position,
	// on the clock, before the test resets a key.
	for _, p := range []*envoyhost.Plugin{a, b} {
		for ticks := 0; position(t, p) == 0; ticks++ {
			require.Less(t, ticks, 100, "the proxy never took the reset log's position")
			if ticks == 0 {
				t.Logf("the first reset log poll failed (resets_poll_failed %d)", counter(p, "meshlimit.global.resets_poll_failed"))
			}
			tickAndWait(t, clock, 20*time.Millisecond, a, b)
		}
	}
	return a, b, clock
}

func TestAnAdminResetFreesAKeyFromThePenaltyBoxOnEveryProxy(t *testing.T) {
	addr := startAdminService(t, redistest.Start(t).Addr())
	cfg := loginResetConfig(`,"scope":"global"`)
	a, b, clock := twoProxies(t, addr, cfg)
	const alice, mallory = "203.0.113.9", "203.0.113.66"
	for _, ip := range []string{alice, mallory} {
		for i := range 5 {
			require.Nil(t, login(t, a.VM(i%2), ip, answer(401)).LocalReply, "%s: failure %d reaches the upstream", ip, i+1)
		}
		// Proxy b learns of the exhausted key at its next attempt: charged on arrival, the service
		// denies it, and the denial puts the key in b's penalty box.
		require.Equal(t, 429, status(login(t, b.VM(0), ip, answer(401))), "%s: a sixth failure is denied on arrival", ip)
		for i, p := range []*envoyhost.Plugin{a, b} {
			require.Equal(t, 429, status(login(t, p.VM(1), ip, answer(200))), "%s is in proxy %d's penalty box", ip, i)
		}
	}

	adminReset(t, addr, cfg, "login", alice)
	tickAndWait(t, clock, resetPollTest, a, b)
	for i, p := range []*envoyhost.Plugin{a, b} {
		for _, vm := range p.VMs() {
			assert.Nil(t, login(t, vm, alice, answer(200)).LocalReply, "proxy %d vm %d: alice is out of the penalty box", i, vm.Index())
			assert.Equal(t, 429, status(login(t, vm, mallory, answer(200))), "proxy %d vm %d: mallory stays in it", i, vm.Index())
		}
		assert.Equal(t, int64(1), counter(p, "meshlimit.global.resets_applied"))
		assert.Zero(t, counter(p, "meshlimit.global.resets_poll_failed"))
	}
}

func TestAnAdminResetReachesALocalRulesPenaltyBox(t *testing.T) {
	addr := startAdminService(t, redistest.Start(t).Addr())
	cfg := loginResetConfig(``)
	a, b, clock := twoProxies(t, addr, cfg)
	const alice, mallory = "203.0.113.9", "203.0.113.66"
	for _, p := range []*envoyhost.Plugin{a, b} {
		for _, ip := range []string{alice, mallory} {
			for range 5 {
				require.Nil(t, login(t, p.VM(0), ip, answer(401)).LocalReply)
			}
			require.Equal(t, 429, status(login(t, p.VM(1), ip, answer(200))), "%s is in the local penalty box", ip)
		}
	}

	assert.Equal(t, []bool{false}, adminResetKeys(t, addr, cfg, "login", alice), "the service holds nothing of a local rule")
	tickAndWait(t, clock, resetPollTest, a, b)
	for i, p := range []*envoyhost.Plugin{a, b} {
		assert.Nil(t, login(t, p.VM(1), alice, answer(200)).LocalReply, "proxy %d: alice is out of the penalty box", i)
		assert.Equal(t, 429, status(login(t, p.VM(0), mallory, answer(200))), "proxy %d: mallory stays in it", i)
		for range 5 {
			require.Nil(t, login(t, p.VM(0), alice, answer(401)).LocalReply, "proxy %d: alice's count starts afresh", i)
		}
		assert.Equal(t, 429, status(login(t, p.VM(0), alice, answer(200))), "proxy %d: and five more failures box her again", i)
	}
}

func TestAnAdminResetGivesALocalKeyAFreshQuota(t *testing.T) {
	addr := startAdminService(t, redistest.Start(t).Addr())
	cfg := `{"global":{"cluster":"` + serviceCluster + `","timeout":"500ms","reset_poll":"200ms"},"rules":[{"name":"per-user",
		"key":[{"header":"x-user"}],"limits":[{"rate":"2/h"}]}]}`
	a, b, clock := twoProxies(t, addr, cfg)
	user := func(p *envoyhost.Plugin, vm int, name string) int {
		return status(roundTrip(t, p.VM(vm), get("api.example", "/", "192.0.2.1", [2]string{"x-user", name})))
	}
	for _, p := range []*envoyhost.Plugin{a, b} {
		for _, name := range []string{"alice", "bob"} {
			require.Equal(t, 200, user(p, 0, name))
			require.Equal(t, 200, user(p, 1, name))
			require.Equal(t, 429, user(p, 0, name), "%s spent the hour's quota of 2", name)
		}
	}

	adminResetKeys(t, addr, cfg, "per-user", "alice")
	tickAndWait(t, clock, resetPollTest, a, b)
	for i, p := range []*envoyhost.Plugin{a, b} {
		assert.Equal(t, 200, user(p, 1, "alice"), "proxy %d: alice has a fresh quota", i)
		assert.Equal(t, 200, user(p, 0, "alice"), "proxy %d: of 2", i)
		assert.Equal(t, 429, user(p, 1, "alice"), "proxy %d: and no more", i)
		assert.Equal(t, 429, user(p, 0, "bob"), "proxy %d: bob's quota is still spent", i)
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
