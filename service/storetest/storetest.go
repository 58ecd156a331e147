// Package storetest holds the contract every service.Store keeps, as one test suite: decisions,
// window counters, settles, concurrency permits, the inspection and reset of keys, and the
// reset log. The tests of each store (package memstore, and package redisstore on a real
// redis-server, standalone and Cluster) run it, so that the stores cannot drift apart.
package storetest

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/algorithms"
	"github.com/meshlimit/meshlimit/service"
)

// Run runs the contract on stores made by newStore, one for each part of it. The parts may
// share what is behind their stores (one redis-server): their keys do not overlap, and only
// one part writes to the reset log.
func Run(t *testing.T, newStore func(t *testing.T) service.Store) {
	t.Run("decisions", func(t *testing.T) {
		s := newStore(t)
		testDecisions(t, s)
		testDecisionEdges(t, s)
	})
	t.Run("decisions in one call", func(t *testing.T) { testDecideAll(t, newStore(t)) })
	t.Run("window counters", func(t *testing.T) { testCounters(t, newStore(t)) })
	t.Run("batched window counters", func(t *testing.T) { testBatchCounters(t, newStore(t)) })
	t.Run("settles", func(t *testing.T) { testSettles(t, newStore(t)) })
	t.Run("undos", func(t *testing.T) { testUndos(t, newStore(t)) })
	t.Run("permits", func(t *testing.T) { testPermits(t, newStore(t)) })
	t.Run("keys", func(t *testing.T) { testKeys(t, newStore(t)) })
	t.Run("reset log", func(t *testing.T) { testResetLog(t, newStore(t)) })
}

// limits are the limits of the decisions' contract, one per algorithm and a bucket with a
// burst.
var limits = []algorithms.Limit{
	{Kind: algorithms.TokenBucket, Quota: 5, Window: time.Hour},
	{Kind: algorithms.TokenBucket, Quota: 5, Window: time.Hour, Burst: 8},
	{Kind: algorithms.LeakyBucket, Quota: 5, Window: time.Hour},
	{Kind: algorithms.FixedWindow, Quota: 5, Window: time.Hour},
	{Kind: algorithms.SlidingLog, Quota: 5, Window: time.Hour},
	{Kind: algorithms.SlidingWindow, Quota: 5, Window: time.Hour},
}

// testDecisions checks Decide against the store's own clock (production's path).
func testDecisions(t *testing.T, s service.Store) {
	ctx := context.Background()
	for _, l := range limits {
		name := fmt.Sprintf("%v burst %d", l.Kind, l.Burst)
		t.Run(name+" admits capacity then denies with a retry", func(t *testing.T) {
			key := "exhaust " + name
			c := l.Capacity()
			d, err := s.Decide(ctx, service.Request{Key: key, Limit: l, Cost: 2})
			require.NoError(t, err)
			assert.True(t, d.Allowed)
			assert.Equal(t, l.Quota, d.Limit)
			assert.Equal(t, c-2, d.Remaining)
			assert.Positive(t, d.Reset)
			for range c - 2 {
				d, err = s.Decide(ctx, service.Request{Key: key, Limit: l, Cost: 1})
				require.NoError(t, err)
				require.True(t, d.Allowed)
			}
			assert.Zero(t, d.Remaining)
			d, err = s.Decide(ctx, service.Request{Key: key, Limit: l, Cost: 1})
			require.NoError(t, err)
			assert.False(t, d.Allowed, "the request after capacity")
			assert.Positive(t, d.RetryAfter)
			assert.LessOrEqual(t, d.RetryAfter, l.TTL())
		})
		t.Run(name+" denies a cost above capacity without charging", func(t *testing.T) {
			key := "over " + name
			d, err := s.Decide(ctx, service.Request{Key: key, Limit: l, Cost: l.Capacity() + 1})
			require.NoError(t, err)
			assert.False(t, d.Allowed)
			assert.Equal(t, algorithms.RetryNever, d.RetryAfter)
			d, err = s.Decide(ctx, service.Request{Key: key, Limit: l, Cost: l.Capacity()})
			require.NoError(t, err)
			assert.True(t, d.Allowed, "the whole capacity is still there")
		})
	}
	t.Run("keys and algorithms are independent counters", func(t *testing.T) {
		fixed := algorithms.Limit{Kind: algorithms.FixedWindow, Quota: 1, Window: time.Hour}
		log := algorithms.Limit{Kind: algorithms.SlidingLog, Quota: 1, Window: time.Hour}
		for _, r := range []service.Request{
			{Key: "indep a", Limit: fixed, Cost: 1},
			{Key: "indep b", Limit: fixed, Cost: 1},
			{Key: "indep a", Limit: log, Cost: 1},
		} {
			d, err := s.Decide(ctx, r)
			require.NoError(t, err)
			assert.True(t, d.Allowed, "%s %v", r.Key, r.Limit.Kind)
		}
		d, err := s.Decide(ctx, service.Request{Key: "indep a", Limit: fixed, Cost: 1})
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
			d, err := s.Decide(ctx, service.Request{Key: "explicit now", Limit: l, Cost: 1, Now: c.at})
			require.NoError(t, err)
			assert.Equal(t, c.allowed, d.Allowed, "step %d", i)
		}
	})
}

// testDecisionEdges checks Decide on invalid requests, a cancelled context and concurrent
// decisions on one key, and Ping.
func testDecisionEdges(t *testing.T, s service.Store) {
	ctx := context.Background()
	t.Run("rejects invalid requests", func(t *testing.T) {
		ok := algorithms.Limit{Kind: algorithms.TokenBucket, Quota: 1, Window: time.Second}
		for _, r := range []service.Request{
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
		_, err := s.Decide(cctx, service.Request{Key: "cancelled", Limit: limits[0], Cost: 1})
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
						d, err := s.Decide(ctx, service.Request{Key: "race", Limit: l, Cost: 1})
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

// testKeys checks Inspect and Reset: what a request would find, read without charging, and
// forgotten.
func testKeys(t *testing.T, s service.Store) {
	ctx := context.Background()
	for _, l := range limits {
		name := fmt.Sprintf("%v burst %d", l.Kind, l.Burst)
		t.Run(name, func(t *testing.T) {
			req := service.Request{Key: "inspected " + name, Limit: l, Cost: 1}
			st, err := s.Inspect(ctx, req)
			require.NoError(t, err)
			assert.Equal(t, service.KeyState{Remaining: l.Capacity()}, st, "a key never seen has the capacity")
			for range l.Capacity() {
				_, err := s.Decide(ctx, req)
				require.NoError(t, err)
			}
			for range 2 {
				st, err = s.Inspect(ctx, req)
				require.NoError(t, err)
				assert.True(t, st.Found)
				assert.Zero(t, st.Remaining)
				assert.Positive(t, st.Reset)
			}
			deleted, err := s.Reset(ctx, req)
			require.NoError(t, err)
			assert.True(t, deleted)
			st, err = s.Inspect(ctx, req)
			require.NoError(t, err)
			assert.False(t, st.Found, "the reset key is forgotten")
			d, err := s.Decide(ctx, req)
			require.NoError(t, err)
			assert.True(t, d.Allowed, "the reset key passes at once")
			deleted, err = s.Reset(ctx, service.Request{Key: "never seen", Limit: l, Cost: 1})
			require.NoError(t, err)
			assert.False(t, deleted)
		})
	}
	t.Run("rejects invalid requests", func(t *testing.T) {
		_, err := s.Inspect(ctx, service.Request{Limit: limits[0], Cost: 1})
		assert.Error(t, err)
		_, err = s.Reset(ctx, service.Request{Key: "k", Cost: 1})
		assert.Error(t, err)
	})
}

// testSettles checks Settle: a refund makes room, an over-run charges beyond the quota, and the
// kinds that keep no exact state to refund into are refused before the store is touched.
func testSettles(t *testing.T, s service.Store) {
	ctx := context.Background()
	t0 := time.Unix(1_800_000_000, 0)
	l := algorithms.Limit{Kind: algorithms.TokenBucket, Quota: 10, Window: 10 * time.Second}
	decide := func(cost int64) algorithms.Decision {
		t.Helper()
		d, err := s.Decide(ctx, service.Request{Key: "settled", Limit: l, Cost: cost, Now: t0})
		require.NoError(t, err)
		return d
	}
	settle := func(delta int64) {
		t.Helper()
		require.NoError(t, errOf(s.Settle(ctx, service.SettleRequest{Key: "settled", Limit: l, Delta: delta, Now: t0})))
	}
	require.True(t, decide(8).Allowed, "the reservation")
	assert.False(t, decide(8).Allowed, "a second reservation does not fit")
	settle(-6) // the first request used 2
	d := decide(8)
	require.True(t, d.Allowed, "the refund made room")
	assert.Zero(t, d.Remaining)
	settle(15) // it used 23: the whole over-run is owed (algorithms.MaxDebt capacities at most)
	d = decide(1)
	require.False(t, d.Allowed)
	assert.Equal(t, 16*time.Second, d.RetryAfter, "a debt of 15: 25 s to repay, then 1 s for the unit, less the 10 s of burst")

	// A fixed window carries its over-run into the next windows, a quota paid per window.
	f := algorithms.Limit{Kind: algorithms.FixedWindow, Quota: 10, Window: 10 * time.Second}
	at := func(dt time.Duration, cost int64) algorithms.Decision {
		t.Helper()
		d, err := s.Decide(ctx, service.Request{Key: "settled window", Limit: f, Cost: cost, Now: t0.Add(dt)})
		require.NoError(t, err)
		return d
	}
	require.True(t, at(0, 8).Allowed, "the reservation")
	require.NoError(t, errOf(s.Settle(ctx, service.SettleRequest{Key: "settled window", Limit: f, Delta: 15, Now: t0})))
	d = at(10*time.Second, 1)
	assert.False(t, d.Allowed, "the next window starts with the 13 carried")
	assert.Equal(t, 10*time.Second, d.RetryAfter, "the window after it starts with 3")
	d = at(20*time.Second, 1)
	assert.True(t, d.Allowed)
	assert.Equal(t, int64(6), d.Remaining)

	for _, k := range []algorithms.Kind{algorithms.SlidingLog, algorithms.SlidingWindow} {
		err := errOf(s.Settle(ctx, service.SettleRequest{Key: "k", Limit: algorithms.Limit{Kind: k, Quota: 10, Window: time.Second}, Delta: -1}))
		assert.ErrorContains(t, err, "does not settle", "%v", k)
	}
	assert.Error(t, errOf(s.Settle(ctx, service.SettleRequest{Key: "k", Limit: l, Delta: -1, Age: -time.Second})), "a negative age")
	testSettleGiven(t, s, t0)
}

// testSettleGiven checks what Settle reports for a settle that is not an undo: the units it
// applied (algorithms.Limit.Settle's), never the units it asked for: a refund's given back, an
// over-run's charged.
func testSettleGiven(t *testing.T, s service.Store, t0 time.Time) {
	ctx := context.Background()
	bucket := algorithms.Limit{Kind: algorithms.TokenBucket, Quota: 10, Window: 10 * time.Second}
	window := algorithms.Limit{Kind: algorithms.FixedWindow, Quota: 10, Window: 10 * time.Second}
	cases := []struct {
		name  string
		l     algorithms.Limit
		cost  int64         // decided at t0 first, or 0
		after time.Duration // the settle's time after t0
		delta int64
		want  int64
	}{
		{"a refund into a fresh bucket gives nothing back", bucket, 0, 0, -7, 0},
		{"a refund of 7 into a bucket with 2 units used gives back 2", bucket, 2, 0, -7, 2},
		{"a refund into a bucket lacking 1.5 units gives back 2", bucket, 2, 500 * time.Millisecond, -7, 2},
		{"a refund of 10^12 into an empty bucket gives back its capacity", bucket, 10, 0, -1_000_000_000_000, 10},
		{"an over-run reports the units it charged", bucket, 2, 0, 5, 5},
		{"an over-run of 10^12 into a fresh bucket charges the 65 capacities of its ceiling", bucket, 0, 0, 1_000_000_000_000, 650},
		{"an over-run of 10^12 into a fixed window charges up to 65 quotas", window, 3, 0, 1_000_000_000_000, 647},
		{"a refund into an empty fixed window gives nothing back", window, 0, 0, -9, 0},
		{"a refund of 9 into a fixed window counting 3 gives back 3", window, 3, 0, -9, 3},
		{"a refund into the window after the reservation's gives nothing back", window, 3, 10 * time.Second, -9, 0},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			key := fmt.Sprintf("given %d", i)
			if c.cost > 0 {
				d, err := s.Decide(ctx, service.Request{Key: key, Limit: c.l, Cost: c.cost, Now: t0})
				require.NoError(t, err)
				require.True(t, d.Allowed)
			}
			given, err := s.Settle(ctx, service.SettleRequest{Key: key, Limit: c.l, Delta: c.delta, At: t0, Now: t0.Add(c.after)})
			require.NoError(t, err)
			assert.Equal(t, c.want, given)
		})
	}
}

// errOf is the error of a store's Settle, for the checks that look at nothing else.
func errOf(_ int64, err error) error { return err }
