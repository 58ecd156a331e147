package rls

import (
	"testing"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/internal/redistest"
	"github.com/meshlimit/meshlimit/service"
	"github.com/meshlimit/meshlimit/service/redisstore"
)

func redisStore(t *testing.T, addr string) service.Store {
	t.Helper()
	s, err := redisstore.New(redisstore.Config{Addrs: []string{addr}})
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s
}

// exercise runs the same requests on f and checks the answers every store must give.
func exercise(t *testing.T, f *fixture) {
	t.Helper()
	for i := range 10 {
		s := f.call(req("edge_proxy_per_ip", desc("remote_address", "9.9.9.9"))).GetStatuses()[0]
		assert.Equal(t, st{ok, 10, uint32(9 - i), 1}, summarize(s), "request %d", i)
	}
	resp := f.call(req("edge_proxy_per_ip", desc("remote_address", "9.9.9.9"), withHits(desc("remote_address", "8.8.8.8"), 0)))
	assert.Equal(t, over, resp.GetOverallCode())
	assert.Equal(t, st{ok, 10, 10, 1}, summarize(resp.GetStatuses()[1]), "hits 0 on a fresh counter")
	// Every descriptor is charged: many keys, spread over the Cluster's slots.
	for i := range 40 {
		r := req("messaging", desc("message_type", "marketing", "to_number", string(rune('a'+i%26))+string(rune('0'+i/26))), desc("to_number", "n"))
		resp = f.call(r)
		assert.Equal(t, uint32(4), resp.GetStatuses()[0].GetLimitRemaining())
		assert.Equal(t, uint32(99-i), resp.GetStatuses()[1].GetLimitRemaining())
	}
	s := f.call(req("units", withHits(desc("algo", "sliding"), 4))).GetStatuses()[0]
	assert.Equal(t, pb.RateLimitResponse_OVER_LIMIT, s.GetCode(), "a cost above the algorithm's quota")
}

func TestTheProtocolOnRedis(t *testing.T) {
	t.Parallel()
	exercise(t, newFixture(t, redisStore(t, redistest.Start(t).Addr()), HeadersOff))
}

func TestTheProtocolOnARedisCluster(t *testing.T) {
	t.Parallel()
	nodes := redistest.StartCluster(t)
	exercise(t, newFixture(t, redisStore(t, nodes[0].Addr()), HeadersOff))
	for _, n := range nodes {
		v, err := n.Do("DBSIZE")
		require.NoError(t, err)
		assert.NotEqual(t, "0", v, "node %s holds counters: they spread over the slots", n.Addr())
	}
}

func TestTheProtocolInMemory(t *testing.T) {
	exercise(t, newFixture(t, memoryStore(t), HeadersOff))
}

// TestAFixedWindowCounterOnRedisIsOneRoundTripWithNoScript: the fronts' counters cost Redis an
// INCRBY and a PEXPIRE NX, not a Lua script (a sixth of the Redis CPU).
func TestAFixedWindowCounterOnRedisIsOneRoundTripWithNoScript(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	f := newFixture(t, redisStore(t, rs.Addr()), HeadersOff)
	_, err := rs.Do("CONFIG", "RESETSTAT")
	require.NoError(t, err)
	for range 5 {
		f.call(req("edge_proxy_per_ip", desc("remote_address", "7.7.7.7")))
	}
	stats, err := rs.Do("INFO", "commandstats")
	require.NoError(t, err)
	assert.NotContains(t, stats, "cmdstat_evalsha")
	assert.NotContains(t, stats, "cmdstat_eval:")
	assert.Contains(t, stats, "cmdstat_incrby:calls=5,")
	assert.Contains(t, stats, "cmdstat_pexpire:calls=5,")
}
