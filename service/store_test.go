package service

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/algorithms"
)

// Every Store passes the same contract, against the store's own clock (production's path):
// the memory store, and the Redis store on a real redis-server.
func TestStoreContract(t *testing.T) {
	t.Parallel()
	rs := startRedis(t)
	stores := []struct {
		name string
		new  func(t *testing.T) Store
	}{
		{"memory", func(t *testing.T) Store {
			s := NewMemoryStore(MemoryConfig{})
			t.Cleanup(func() { s.Close() })
			return s
		}},
		{"redis", func(t *testing.T) Store { return newRedisStore(t, rs.Addr()) }},
	}
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			testStoreContract(t, st.new(t))
		})
	}
}

var contractLimits = []algorithms.Limit{
	{Kind: algorithms.TokenBucket, Quota: 5, Window: time.Hour},
	{Kind: algorithms.TokenBucket, Quota: 5, Window: time.Hour, Burst: 8},
	{Kind: algorithms.LeakyBucket, Quota: 5, Window: time.Hour},
	{Kind: algorithms.FixedWindow, Quota: 5, Window: time.Hour},
	{Kind: algorithms.SlidingLog, Quota: 5, Window: time.Hour},
	{Kind: algorithms.SlidingWindow, Quota: 5, Window: time.Hour},
}

func testStoreContract(t *testing.T, s Store) {
	ctx := context.Background()
	// Keys are unique per subtest: the Redis store is shared by the stores' subtests.
	for _, l := range contractLimits {
		name := fmt.Sprintf("%v burst %d", l.Kind, l.Burst)
		t.Run(name+" admits capacity then denies with a retry", func(t *testing.T) {
			key := "exhaust " + name
			c := l.Capacity()
			d, err := s.Decide(ctx, Request{Key: key, Limit: l, Cost: 2})
			require.NoError(t, err)
			assert.True(t, d.Allowed)
			assert.Equal(t, l.Quota, d.Limit)
			assert.Equal(t, c-2, d.Remaining)
			assert.Positive(t, d.Reset)
			for range c - 2 {
				d, err = s.Decide(ctx, Request{Key: key, Limit: l, Cost: 1})
				require.NoError(t, err)
				require.True(t, d.Allowed)
			}
			assert.Zero(t, d.Remaining)
			d, err = s.Decide(ctx, Request{Key: key, Limit: l, Cost: 1})
			require.NoError(t, err)
			assert.False(t, d.Allowed, "the request after capacity")
			assert.Positive(t, d.RetryAfter)
			assert.LessOrEqual(t, d.RetryAfter, l.TTL())
		})
		t.Run(name+" denies a cost above capacity without charging", func(t *testing.T) {
			key := "over " + name
			d, err := s.Decide(ctx, Request{Key: key, Limit: l, Cost: l.Capacity() + 1})
			require.NoError(t, err)
			assert.False(t, d.Allowed)
			assert.Equal(t, algorithms.RetryNever, d.RetryAfter)
			d, err = s.Decide(ctx, Request{Key: key, Limit: l, Cost: l.Capacity()})
			require.NoError(t, err)
			assert.True(t, d.Allowed, "the whole capacity is still there")
		})
	}
	t.Run("keys and algorithms are independent counters", func(t *testing.T) {
		fixed := algorithms.Limit{Kind: algorithms.FixedWindow, Quota: 1, Window: time.Hour}
		log := algorithms.Limit{Kind: algorithms.SlidingLog, Quota: 1, Window: time.Hour}
		for _, r := range []Request{
			{Key: "indep a", Limit: fixed, Cost: 1},
			{Key: "indep b", Limit: fixed, Cost: 1},
			{Key: "indep a", Limit: log, Cost: 1},
		} {
			d, err := s.Decide(ctx, r)
			require.NoError(t, err)
			assert.True(t, d.Allowed, "%s %v", r.Key, r.Limit.Kind)
		}
		d, err := s.Decide(ctx, Request{Key: "indep a", Limit: fixed, Cost: 1})
		require.NoError(t, err)
		assert.False(t, d.Allowed)
	})
	t.Run("an explicit now is honoured", func(t *testing.T) {
		l := algorithms.Limit{Kind: algorithms.FixedWindow, Quota: 1, Window: time.Second}
		t0 := time.Unix(1_800_000_000, 0)
		for i, c := range []struct {
			at      time.Time
			allowed bool
		}{
			{t0, true},
			{t0.Add(999 * time.Millisecond), false}, // same window
			{t0.Add(time.Second), true},             // the next one
			{t0.Add(500 * time.Millisecond), false}, // clock stepped back: stays in the newer window
		} {
			d, err := s.Decide(ctx, Request{Key: "explicit now", Limit: l, Cost: 1, Now: c.at})
			require.NoError(t, err)
			assert.Equal(t, c.allowed, d.Allowed, "step %d", i)
		}
	})
	t.Run("rejects invalid requests", func(t *testing.T) {
		ok := algorithms.Limit{Kind: algorithms.TokenBucket, Quota: 1, Window: time.Second}
		for _, r := range []Request{
			{Key: "", Limit: ok, Cost: 1},
			{Key: "k", Limit: ok, Cost: 0},
			{Key: "k", Limit: algorithms.Limit{Kind: algorithms.TokenBucket, Quota: 0, Window: time.Second}, Cost: 1},
			{Key: "k", Limit: algorithms.Limit{Quota: 1, Window: time.Second}, Cost: 1},
		} {
			_, err := s.Decide(ctx, r)
			assert.Error(t, err, "%+v", r)
		}
	})
	t.Run("fails on a cancelled context", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		_, err := s.Decide(cctx, Request{Key: "cancelled", Limit: contractLimits[0], Cost: 1})
		assert.ErrorIs(t, err, context.Canceled)
	})
	t.Run("decisions on one key are atomic under concurrency", func(t *testing.T) {
		for _, l := range []algorithms.Limit{
			{Kind: algorithms.FixedWindow, Quota: 100, Window: time.Hour},
			{Kind: algorithms.TokenBucket, Quota: 100, Window: 100 * time.Hour},
			{Kind: algorithms.SlidingLog, Quota: 100, Window: time.Hour},
		} {
			var admitted atomic.Int64
			var wg sync.WaitGroup
			for g := range 32 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range 10 {
						d, err := s.Decide(ctx, Request{Key: "race", Limit: l, Cost: 1})
						if !assert.NoError(t, err, "goroutine %d", g) {
							return
						}
						if d.Allowed {
							admitted.Add(1)
						}
					}
				}()
			}
			wg.Wait()
			assert.Equal(t, int64(100), admitted.Load(), "%v: 320 requests, quota 100", l.Kind)
		}
	})
	t.Run("pings", func(t *testing.T) {
		assert.NoError(t, s.Ping(ctx))
	})
}

func TestMemoryStoreSweepsIdleKeys(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_800_000_000, 0)
	s := NewMemoryStore(MemoryConfig{SweepInterval: -1, Clock: func() time.Time { return now }})
	defer s.Close()
	ctx := context.Background()
	short := algorithms.Limit{Kind: algorithms.TokenBucket, Quota: 10, Window: time.Second}
	long := algorithms.Limit{Kind: algorithms.FixedWindow, Quota: 10, Window: time.Hour}
	for i := range 50 {
		_, err := s.Decide(ctx, Request{Key: "short" + strconv.Itoa(i), Limit: short, Cost: 1})
		require.NoError(t, err)
		_, err = s.Decide(ctx, Request{Key: "long" + strconv.Itoa(i), Limit: long, Cost: 1})
		require.NoError(t, err)
	}
	require.Equal(t, 100, s.Len())
	assert.Zero(t, s.sweep(now.UnixNano()), "nothing is idle yet")
	// A token bucket charged 1 of 10 per second is full again after 100ms.
	assert.Equal(t, 50, s.sweep(now.Add(100*time.Millisecond).UnixNano()))
	assert.Equal(t, 50, s.Len())
	assert.Equal(t, 50, s.sweep(now.Add(time.Hour).UnixNano()), "the next window")
	assert.Zero(t, s.Len())
}

func TestMemoryStoreBoundsKeys(t *testing.T) {
	t.Parallel()
	s := NewMemoryStore(MemoryConfig{MaxKeys: memShards * 4, SweepInterval: -1})
	defer s.Close()
	l := algorithms.Limit{Kind: algorithms.FixedWindow, Quota: 10, Window: time.Hour}
	for i := range 10_000 {
		_, err := s.Decide(context.Background(), Request{Key: strconv.Itoa(i), Limit: l, Cost: 1})
		require.NoError(t, err)
	}
	assert.LessOrEqual(t, s.Len(), memShards*4)
}

func TestMemoryStoreSweepStopsOnClose(t *testing.T) {
	t.Parallel()
	s := NewMemoryStore(MemoryConfig{SweepInterval: time.Millisecond})
	time.Sleep(5 * time.Millisecond)
	require.NoError(t, s.Close())
	require.NoError(t, s.Close(), "Close is idempotent")
	select {
	case <-s.done:
	default:
		t.Fatal("the sweep goroutine is still running")
	}
}

// A key whose state is idle disappears from Redis: PEXPIRE is Limit.TTL.
func TestRedisTTL(t *testing.T) {
	t.Parallel()
	rs := startRedis(t)
	s := newRedisStore(t, rs.Addr())
	ctx := context.Background()
	for _, l := range []algorithms.Limit{
		{Kind: algorithms.TokenBucket, Quota: 10, Window: time.Minute, Burst: 20}, // TTL 2 min
		{Kind: algorithms.SlidingWindow, Quota: 10, Window: time.Minute},          // TTL 2 min
		{Kind: algorithms.SlidingLog, Quota: 10, Window: time.Minute},             // TTL 1 min
	} {
		req := Request{Key: "ttl", Limit: l, Cost: 1}
		_, err := s.Decide(ctx, req)
		require.NoError(t, err)
		pttl, err := rs.Do("PTTL", s.Key(req))
		require.NoError(t, err)
		ms, _ := strconv.ParseInt(pttl, 10, 64)
		assert.InDelta(t, l.TTL().Milliseconds(), ms, 1000, "%v", l.Kind)
	}
	short := Request{Key: "ttl short", Limit: algorithms.Limit{Kind: algorithms.FixedWindow, Quota: 10, Window: 20 * time.Millisecond}, Cost: 1}
	_, err := s.Decide(ctx, short)
	require.NoError(t, err)
	waitFor(t, 2*time.Second, "the idle key expires", func() bool {
		n, err := rs.Do("EXISTS", s.Key(short))
		return err == nil && n == "0"
	})
}

// After SCRIPT FLUSH, EVALSHA answers NOSCRIPT and the store reloads the script.
func TestRedisReloadsFlushedScripts(t *testing.T) {
	t.Parallel()
	rs := startRedis(t)
	s := newRedisStore(t, rs.Addr())
	ctx := context.Background()
	l := algorithms.Limit{Kind: algorithms.FixedWindow, Quota: 3, Window: time.Hour}
	d, err := s.Decide(ctx, Request{Key: "flush", Limit: l, Cost: 1})
	require.NoError(t, err)
	require.Equal(t, int64(2), d.Remaining)

	src, err := Script(algorithms.FixedWindow)
	require.NoError(t, err)
	sha, err := rs.Do("SCRIPT", "LOAD", src)
	require.NoError(t, err)
	_, err = rs.Do("SCRIPT", "FLUSH")
	require.NoError(t, err)
	evalsha := func() error {
		_, err := rs.Do("EVALSHA", sha, "1", "ml:{probe}:fixed_window", "3", "3600000000", "0", "1", "1000")
		return err
	}
	require.ErrorContains(t, evalsha(), "NOSCRIPT")

	d, err = s.Decide(ctx, Request{Key: "flush", Limit: l, Cost: 1})
	require.NoError(t, err)
	assert.Equal(t, int64(1), d.Remaining, "the state survived")
	assert.NoError(t, evalsha(), "the store loaded the script again")
}
