package e2e

import (
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
// at addrs, and returns its address.
func startRedisService(t *testing.T, addrs ...string) string {
	t.Helper()
	store, err := redisstore.New(redisstore.Config{Addrs: addrs})
	require.NoError(t, err)
	t.Cleanup(func() { _ = store.Close() })
	// 150 ms: below the filters' 200 ms call timeout in these tests, as in production (10 ms below 20
	// ms), and wide enough that a loaded test machine (the race detector, a Redis Cluster) does not
	// turn slow answers into failures the tests would count.
	h, err := service.NewHandler(service.Config{Store: store, Timeout: 150 * time.Millisecond})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

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
	req := func(p *envoyhost.Plugin) (int, time.Duration) {
		start := time.Now()
		res := roundTrip(t, p.VM(0), get("api.example", "/", "192.0.2.1", [2]string{"x-user", "carol"}))
		return status(res), time.Since(start)
	}
	code, _ := req(open)
	require.Equal(t, 200, code)

	redis.Stop() // mid-run
	for _, tc := range []struct {
		p    *envoyhost.Plugin
		want int
	}{{open, 200}, {closed, 429}} {
		code, took := req(tc.p)
		assert.Equal(t, tc.want, code)
		assert.Less(t, took, time.Second, "answered within the service's deadline and the filter's timeout, never hung")
	}
	for _, p := range []*envoyhost.Plugin{open, closed} {
		assert.Equal(t, int64(1), counter(p, "meshlimit.global.failures"))
		for _, vm := range p.VMs() {
			assert.NoError(t, vm.Failed(), "no trap")
		}
	}

	redis.Start()
	redistest.WaitFor(t, 10*time.Second, "the service sees Redis again", func() bool {
		code, _ := req(closed)
		return code == 200
	})
	code, _ = req(open)
	assert.Equal(t, 200, code)
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
