package service

import (
	"context"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/algorithms"
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

func TestACountThatWouldPassMaxQuotaIsNotCharged(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t0 := time.Unix(1_700_000_000, 0)
	for name, s := range counterStores(t) {
		t.Run(name, func(t *testing.T) {
			n, _, err := CountWindow(ctx, s, "full", time.Hour, algorithms.MaxQuota-5, t0)
			require.NoError(t, err)
			require.Equal(t, algorithms.MaxQuota-5, n)
			n, reset, err := CountWindow(ctx, s, "full", time.Hour, 10, t0)
			require.NoError(t, err)
			assert.Equal(t, algorithms.MaxQuota-5, n, "the charge of 10 does not fit: not counted")
			assert.Equal(t, time.Hour-time.Duration(t0.Unix()%3600)*time.Second, reset)
			n, _, err = CountWindow(ctx, s, "full", time.Hour, 5, t0)
			require.NoError(t, err)
			assert.Equal(t, algorithms.MaxQuota, n, "a charge that fits exactly is counted")
			n, _, err = CountWindow(ctx, s, "full", time.Hour, 0, t0)
			require.NoError(t, err)
			assert.Equal(t, algorithms.MaxQuota, n)
		})
	}
}

// TestCountWindowAgreesOnRedisAndMemory replays random traces (windows from a millisecond to a
// year, hits from 0 to past MaxQuota, time moving forward by gaps within and across windows)
// through both stores: every count and reset must be identical.
func TestCountWindowAgreesOnRedisAndMemory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	stores := counterStores(t)
	r := rand.New(rand.NewPCG(14, 2026))
	windows := []time.Duration{time.Millisecond, time.Second, time.Minute, time.Hour, 24 * time.Hour, 365 * 24 * time.Hour}
	for trace := range 40 {
		key := "trace-" + strconv.Itoa(trace)
		w := windows[r.IntN(len(windows))]
		now := time.UnixMicro(1_700_000_000_000_000 + r.Int64N(int64(w/time.Microsecond)))
		for step := range 30 {
			var hits int64
			switch r.IntN(6) {
			case 0:
				hits = 0
			case 1:
				hits = algorithms.MaxQuota - r.Int64N(3)
			case 2:
				hits = algorithms.MaxQuota + r.Int64N(3)
			default:
				hits = 1 + r.Int64N(1000)
			}
			if r.IntN(3) == 0 {
				now = now.Add(time.Duration(r.Int64N(int64(2 * w))))
			}
			mn, mr, merr := CountWindow(ctx, stores["memory"], key, w, hits, now)
			rn, rr, rerr := CountWindow(ctx, stores["redis"], key, w, hits, now)
			require.NoError(t, merr)
			require.NoError(t, rerr)
			require.Equal(t, [2]int64{mn, int64(mr)}, [2]int64{rn, int64(rr)}, "trace %d step %d: window %v, %d hits at %v", trace, step, w, hits, now)
		}
	}
}

func TestACounterKeyLivesToItsWindowsEndAndTheGrace(t *testing.T) {
	t.Parallel()
	rs := startRedis(t)
	s := newRedisStore(t, rs.Addr())
	now := time.Now()
	_, reset, err := CountWindow(context.Background(), s, "ttl", time.Minute, 1, now)
	require.NoError(t, err)
	us := now.UnixMicro()
	start := us - us%int64(time.Minute/time.Microsecond)
	out, err := rs.Do("PTTL", s.windowKey("ttl", start))
	require.NoError(t, err)
	ttl, err := strconv.ParseInt(out, 10, 64)
	require.NoError(t, err)
	assert.LessOrEqual(t, ttl, (reset+counterGrace).Milliseconds()+1)
	assert.Greater(t, ttl, (reset+counterGrace).Milliseconds()-1000, "set by this call, a moment ago")
}

func TestTheRedisStoresClockFollowsRedisTime(t *testing.T) {
	t.Parallel()
	rs := startRedis(t)
	s := newRedisStore(t, rs.Addr())
	require.True(t, s.clock.synced.Load(), "synced when the store is made")
	for range 3 {
		before := s.clock.now()
		f, err := s.client.Do(context.Background(), s.client.B().Time().Build()).AsStrSlice()
		require.NoError(t, err)
		after := s.clock.now()
		require.Len(t, f, 2)
		sec, _ := strconv.ParseInt(f[0], 10, 64)
		us, _ := strconv.ParseInt(f[1], 10, 64)
		redisNow := time.Unix(sec, us*1000)
		// On one host the offset is about 0; the estimate must bracket Redis TIME within the
		// sync's error (a millisecond is generous on loopback).
		assert.WithinRange(t, redisNow, before.Add(-time.Millisecond), after.Add(time.Millisecond))
	}
}
