package service

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/internal/redistest"
)

type redisServer = redistest.Server

func requireRedisServer(t testing.TB) { redistest.Require(t) }

func startRedis(t testing.TB, extra ...string) *redisServer { return redistest.Start(t, extra...) }

func startCluster(t testing.TB) []*redisServer { return redistest.StartCluster(t) }

// waitFor waits for cond, polling, for at least a minute whatever d says: the bound is a safety net
// against a hang, never what a test passes or fails by on a loaded machine.
func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	redistest.WaitFor(t, max(d, time.Minute), what, cond)
}

// newRedisStore returns a RedisStore on addrs, closed when the test ends.
func newRedisStore(t testing.TB, addrs ...string) *RedisStore {
	t.Helper()
	s, err := NewRedisStore(RedisConfig{Addrs: addrs})
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s
}
