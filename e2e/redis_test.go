package e2e

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/internal/envoyhost"
	"github.com/meshlimit/meshlimit/internal/redistest"
	"github.com/meshlimit/meshlimit/service"
	"github.com/meshlimit/meshlimit/service/redisstore"
)

// startRedisService runs one replica of the decision service on a loopback port, backed by the Redis
// at addrs, and returns its address. It decides at settleServiceTime, frozen: a bucket of a test
// never refills while a loaded machine runs it slowly (a 5/m bucket gave a unit back every 12 s
// of Redis TIME), and no window ends in the middle of a test.
func startRedisService(t *testing.T, addrs ...string) string {
	t.Helper()
	return startRedisServiceOn(t, func() time.Time { return settleServiceTime }, addrs...)
}

// startRealClockRedisService is startRedisService on Redis TIME: for the tests of permits whose
// leases end in Redis (their keys expire on Redis's clock whatever time the service passes).
func startRealClockRedisService(t *testing.T, addrs ...string) string {
	t.Helper()
	return startRedisServiceOn(t, nil, addrs...)
}

// startRedisServiceOn is startRedisService deciding at now() (nil: Redis TIME).
func startRedisServiceOn(t *testing.T, now func() time.Time, addrs ...string) string {
	t.Helper()
	rs, err := redisstore.New(redisstore.Config{Addrs: addrs, DialTimeout: testDialTimeout})
	require.NoError(t, err)
	t.Cleanup(func() { _ = rs.Close() })
	var store service.Store = rs
	if now != nil {
		store = onClock(rs, now)
	}
	// A store deadline no loaded test machine reaches (the race detector, a Redis Cluster, other
	// processes on both cores): a slow answer is never a failure the tests would count. A dead Redis
	// is noticed by the filter's own call timeout, on the virtual clock the test moves.
	h, err := service.NewHandler(service.Config{Store: store, Timeout: 10 * time.Second})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// testDialTimeout bounds the services' connections to Redis, as their 10 s store deadline bounds
// a decision: the store's client dials a new connection when the calls in flight grow (a test's
// burst), and a loaded machine took over the default second for one: the decision failed, a 503
// that the filter counted in global.failures and let through (11 of 10 admitted in
// TestTwoServiceReplicasOnOneRedisShareTheCount). A dead Redis refuses the connection at once.
const testDialTimeout = 10 * time.Second

const serviceCluster = "outbound|8081||meshlimit.meshlimit.svc.cluster.local"

func toReplica(addr string) func(*envoyhost.Config) {
	return func(c *envoyhost.Config) {
		c.Clusters = map[string]string{serviceCluster: addr}
		c.Process = envoyhost.NewProcess() // each proxy is its own Envoy process
	}
}

// burst sends n requests for user through every VM of every proxy at once and counts the admitted.
func burst(t *testing.T, proxies []*envoyhost.Plugin, user string, n int) (admitted int64) {
	t.Helper()
	var count atomic.Int64
	var wg sync.WaitGroup
	for _, p := range proxies {
		for _, vm := range p.VMs() {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range n {
					if roundTrip(t, vm, get("api.example", "/", "192.0.2.1", [2]string{"x-user", user})).LocalReply == nil {
						count.Add(1)
					}
				}
			}()
		}
	}
	wg.Wait()
	return count.Load()
}

func TestTwoServiceReplicasOnOneRedisShareTheCount(t *testing.T) {
	redis := redistest.Start(t)
	cfg := globalConfig(`{"name":"per-user","scope":"global","key":[{"header":"x-user"}],"limits":[{"rate":"10/m"}]}`)
	a := load(t, module(t, "meshlimit"), cfg, 2, toReplica(startRedisService(t, redis.Addr())))
	b := load(t, module(t, "meshlimit"), cfg, 2, toReplica(startRedisService(t, redis.Addr())))
	// 2 proxies × 3 VMs × 4 requests = 24 requests, through two replicas, for a quota of 10.
	assert.Equal(t, int64(10), burst(t, []*envoyhost.Plugin{a, b}, "bob", 4))
	for _, p := range []*envoyhost.Plugin{a, b} {
		assert.Zero(t, counter(p, "meshlimit.global.failures"))
	}
}

func TestWhenRedisDiesTheFilterFailsAsConfiguredWithinItsTimeoutAndRecovers(t *testing.T) {
	redis := redistest.Start(t)
	addr := startRedisService(t, redis.Addr())
	open := load(t, module(t, "meshlimit"), globalConfig(`{"name":"g","scope":"global","key":[{"header":"x-user"}],
		"limits":[{"rate":"1000/m"}]}`), 2, toReplica(addr))
	closed := load(t, module(t, "meshlimit"), globalConfig(`{"name":"g","scope":"global","key":[{"header":"x-user"}],
		"limits":[{"rate":"1000/m"}],"failure_mode":"deny"}`), 2, toReplica(addr))
	req := func(p *envoyhost.Plugin) int {
		return status(roundTrip(t, p.VM(0), get("api.example", "/", "192.0.2.1", [2]string{"x-user", "carol"})))
	}
	// reqDown sends one request while Redis is down and, while the filter waits for the service, moves
	// the proxy's clock by the call timeout (200ms): by then the request is decided, whatever the
	// service's Redis client does.
	reqDown := func(p *envoyhost.Plugin) int {
		s, act := send(t, p.VM(0), get("api.example", "/", "192.0.2.1", [2]string{"x-user", "carol"}))
		if act == envoyhost.ActionPause {
			p.Clock().Advance(200 * time.Millisecond)
		}
		require.NotEqual(t, envoyhost.ActionPause, state(t, s), "decided within the filter's timeout, never hung")
		return status(envoyhost.Result{LocalReply: s.LocalReply()})
	}
	require.Equal(t, 200, req(open))
	require.Zero(t, counter(open, "meshlimit.global.failures"))

	redis.Stop() // mid-run
	for _, tc := range []struct {
		p    *envoyhost.Plugin
		want int
	}{{open, 200}, {closed, 429}} {
		assert.Equal(t, tc.want, reqDown(tc.p))
	}
	for _, p := range []*envoyhost.Plugin{open, closed} {
		assert.Equal(t, int64(1), counter(p, "meshlimit.global.failures"))
		for _, vm := range p.VMs() {
			assert.NoError(t, vm.Failed(), "no trap")
		}
	}

	redis.Start()
	waitReady(t, addr)
	eventually(t, "the service sees Redis again", func() bool {
		if req(closed) == 200 {
			return true
		}
		closed.Clock().Advance(11 * time.Second) // past the breaker's cooldown, should the failures have opened it
		return false
	})
	assert.Equal(t, 200, req(open))
}

// waitReady waits until the service at addr says it can decide (GET /readyz: its store answers).
func waitReady(t testing.TB, addr string) {
	t.Helper()
	eventually(t, "the service is ready", func() bool {
		res, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			return false
		}
		res.Body.Close()
		return res.StatusCode == http.StatusOK
	})
}

func TestAGlobalLimitOnARedisClusterOfThreeMasters(t *testing.T) {
	nodes := redistest.StartCluster(t)
	addr := startRedisService(t, nodes[0].Addr())
	p := load(t, module(t, "meshlimit"), globalConfig(`{"name":"per-user","scope":"global","key":[{"header":"x-user"}],
		"limits":[{"name":"per-user-min","rate":"5/m"},{"name":"per-user-hour","rate":"100/h","algorithm":"sliding_window"}]}`), 2, toReplica(addr))
	for i, user := range []string{"u1", "u2", "u3", "u4", "u5", "u6"} { // spread over the cluster's slots
		assert.Equal(t, int64(5), burst(t, []*envoyhost.Plugin{p}, user, 3), "user %d: 9 requests for a quota of 5", i)
	}
	assert.Zero(t, counter(p, "meshlimit.global.failures"))
	var keys []string
	for _, n := range nodes {
		k, err := n.Do("DBSIZE")
		require.NoError(t, err)
		keys = append(keys, k)
	}
	t.Logf("keys per master: %v", keys)
}
