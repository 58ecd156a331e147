package service

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// counterStores returns a MemoryStore and a RedisStore on a fresh redis-server.
func counterStores(t *testing.T) map[string]Store {
	t.Helper()
	mem := NewMemoryStore(MemoryConfig{SweepInterval: -1})
	t.Cleanup(func() { mem.Close() })
	return map[string]Store{"memory": mem, "redis": newRedisStore(t, startRedis(t).Addr())}
}

func TestCountWindow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t0 := time.Unix(1_700_000_080, 500_000_000) // 40.5 s into a minute (1_700_000_040 is a multiple of 60)
	for name, s := range counterStores(t) {
		t.Run(name+": every call is charged, with no quota to stop it", func(t *testing.T) {
			for want := int64(1); want <= 5; want++ {
				n, reset, err := CountWindow(ctx, s, "charged", time.Minute, 1, t0)
				require.NoError(t, err)
				assert.Equal(t, want, n)
				assert.Equal(t, 19500*time.Millisecond, reset, "to the end of the minute")
			}
			n, _, err := CountWindow(ctx, s, "charged", time.Minute, 1000, t0)
			require.NoError(t, err)
			assert.Equal(t, int64(1005), n)
		})
		t.Run(name+": zero hits read the count without charging it", func(t *testing.T) {
			n, reset, err := CountWindow(ctx, s, "peeked", time.Minute, 0, t0)
			require.NoError(t, err)
			assert.Zero(t, n)
			assert.Zero(t, reset, "no count, no reset")
			_, _, err = CountWindow(ctx, s, "peeked", time.Minute, 3, t0)
			require.NoError(t, err)
			for range 2 {
				n, reset, err = CountWindow(ctx, s, "peeked", time.Minute, 0, t0)
				require.NoError(t, err)
				assert.Equal(t, int64(3), n)
				assert.Equal(t, 19500*time.Millisecond, reset)
			}
		})
		t.Run(name+": windows are aligned to the epoch", func(t *testing.T) {
			_, _, err := CountWindow(ctx, s, "aligned", time.Minute, 2, t0)
			require.NoError(t, err)
			end := time.Unix(1_700_000_100, 0) // the next minute
			n, _, err := CountWindow(ctx, s, "aligned", time.Minute, 0, end.Add(-time.Microsecond))
			require.NoError(t, err)
			assert.Equal(t, int64(2), n, "the last microsecond of the window")
			n, reset, err := CountWindow(ctx, s, "aligned", time.Minute, 1, end)
			require.NoError(t, err)
			assert.Equal(t, int64(1), n, "a new window starts at the minute")
			assert.Equal(t, time.Minute, reset)
		})
		t.Run(name+": negative hits are refused", func(t *testing.T) {
			_, _, err := CountWindow(ctx, s, "neg", time.Minute, -1, t0)
			require.Error(t, err)
		})
	}
}

func TestCountWindowOnACluster(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t)
	s := newRedisStore(t, nodes[0].Addr())
	ctx := context.Background()
	t0 := time.Unix(1_700_000_000, 0)
	for i := range 30 {
		key := "rls:tenant-" + string(rune('a'+i%26)) + string(rune('0'+i/26))
		for want := int64(1); want <= 3; want++ {
			n, _, err := CountWindow(ctx, s, key, time.Second, 1, t0)
			require.NoError(t, err)
			require.Equal(t, want, n, key)
		}
		n, _, err := CountWindow(ctx, s, key, time.Second, 0, t0)
		require.NoError(t, err)
		require.Equal(t, int64(3), n, key)
	}
}
