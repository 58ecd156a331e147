package redisstore

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/algorithms"
	"github.com/meshlimit/meshlimit/internal/redistest"
	"github.com/meshlimit/meshlimit/service"
	"github.com/meshlimit/meshlimit/service/memstore"
	"github.com/meshlimit/meshlimit/service/storetest"
)

// newStore returns a Store on addrs, closed when the test ends.
func newStore(t testing.TB, addrs ...string) *Store {
	t.Helper()
	s, err := New(Config{Addrs: addrs})
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s
}

// The Redis store keeps the contract on a standalone redis-server and on a Redis Cluster, every
// part of it against Redis's clock (TIME) or the time given.
func TestTheRedisStoreKeepsTheStoreContract(t *testing.T) {
	t.Parallel()
	t.Run("standalone", func(t *testing.T) {
		t.Parallel()
		rs := redistest.Start(t)
		storetest.Run(t, func(t *testing.T) service.Store { return newStore(t, rs.Addr()) })
	})
	t.Run("cluster", func(t *testing.T) {
		t.Parallel()
		nodes := redistest.StartCluster(t)
		storetest.Run(t, func(t *testing.T) service.Store { return newStore(t, nodes[0].Addr()) })
	})
}

// A key whose state is idle disappears from Redis: PEXPIRE is Limit.TTL.
func TestRedisTTL(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	s := newStore(t, rs.Addr())
	ctx := context.Background()
	for _, l := range []algorithms.Limit{
		{Kind: algorithms.TokenBucket, Quota: 10, Window: time.Minute, Burst: 20}, // TTL 2 min
		{Kind: algorithms.SlidingWindow, Quota: 10, Window: time.Minute},          // TTL 2 min
		{Kind: algorithms.SlidingLog, Quota: 10, Window: time.Minute},             // TTL 1 min
	} {
		req := service.Request{Key: "ttl", Limit: l, Cost: 1}
		_, err := s.Decide(ctx, req)
		require.NoError(t, err)
		pttl, err := rs.Do("PTTL", s.stateKey(l.Kind, req.Key))
		require.NoError(t, err)
		ms, _ := strconv.ParseInt(pttl, 10, 64)
		assert.InDelta(t, l.TTL().Milliseconds(), ms, 1000, "%v", l.Kind)
	}
	short := service.Request{Key: "ttl short", Limit: algorithms.Limit{Kind: algorithms.FixedWindow, Quota: 10, Window: 20 * time.Millisecond}, Cost: 1}
	_, err := s.Decide(ctx, short)
	require.NoError(t, err)
	redistest.WaitFor(t, 2*time.Second, "the idle key expires", func() bool {
		n, err := rs.Do("EXISTS", s.stateKey(short.Limit.Kind, short.Key))
		return err == nil && n == "0"
	})
}

// A fixed window in debt keeps its key until the debt is paid: the settle and the decisions that
// find the debt set a PEXPIRE past the window (a key that expired would forgive the debt).
func TestAFixedWindowInDebtKeepsItsKeyUntilTheDebtIsPaid(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	s := newStore(t, rs.Addr())
	ctx := context.Background()
	l := algorithms.Limit{Kind: algorithms.FixedWindow, Quota: 10, Window: time.Minute}
	req := service.Request{Key: "debt", Limit: l, Cost: 10}
	pttl := func() time.Duration {
		t.Helper()
		v, err := rs.Do("PTTL", s.stateKey(l.Kind, req.Key))
		require.NoError(t, err)
		ms, _ := strconv.ParseInt(v, 10, 64)
		return time.Duration(ms) * time.Millisecond
	}
	_, err := s.Decide(ctx, req)
	require.NoError(t, err)
	_, err = s.Settle(ctx, service.SettleRequest{Key: req.Key, Limit: l, Delta: 300})
	require.NoError(t, err)
	assert.Greater(t, pttl(), 3*time.Minute, "a count of 310 is paid in the fourth window from now")
	req.Cost = 1
	d, err := s.Decide(ctx, req)
	require.NoError(t, err)
	assert.False(t, d.Allowed)
	assert.Greater(t, d.RetryAfter, 3*time.Minute)
	assert.Greater(t, pttl(), 3*time.Minute, "a denial in debt keeps the key as long")
}

// After SCRIPT FLUSH, EVALSHA answers NOSCRIPT and the store reloads the script.
func TestRedisReloadsFlushedScripts(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	s := newStore(t, rs.Addr())
	ctx := context.Background()
	l := algorithms.Limit{Kind: algorithms.FixedWindow, Quota: 3, Window: time.Hour}
	now := time.Now() // both decisions at one time: the hour's window cannot turn between them
	d, err := s.Decide(ctx, service.Request{Key: "flush", Limit: l, Cost: 1, Now: now})
	require.NoError(t, err)
	require.Equal(t, int64(2), d.Remaining)

	src, err := script(algorithms.FixedWindow)
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

	d, err = s.Decide(ctx, service.Request{Key: "flush", Limit: l, Cost: 1, Now: now})
	require.NoError(t, err)
	assert.Equal(t, int64(1), d.Remaining, "the state survived")
	assert.NoError(t, evalsha(), "the store loaded the script again")
}

// A Redis key prefix holding a brace would change the hash tag: it is refused.
func TestAKeyPrefixWithABraceIsRefused(t *testing.T) {
	_, err := New(Config{Addrs: []string{"127.0.0.1:1"}, KeyPrefix: "ml:{x}"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "may not hold { or }")
	assert.False(t, errors.Is(err, service.ErrStoreFull))
}

// TestCountWindowAgreesWithTheMemoryStore replays random traces (windows from a millisecond to
// a year, hits from 0 to past MaxQuota, time moving forward by gaps within and across windows)
// through both stores: the counter without a script must count as the memory store's
// fixed-window code does, every count and reset identical.
func TestCountWindowAgreesWithTheMemoryStore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	mem := memstore.New(memstore.Config{SweepInterval: -1})
	t.Cleanup(func() { mem.Close() })
	stores := map[string]service.Store{"memory": mem, "redis": newStore(t, redistest.Start(t).Addr())}
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
			req := service.CountRequest{Key: key, Window: w, Hits: hits, Now: now}
			mn, mr, merr := stores["memory"].CountWindow(ctx, req)
			rn, rr, rerr := stores["redis"].CountWindow(ctx, req)
			require.NoError(t, merr)
			require.NoError(t, rerr)
			require.Equal(t, [2]int64{mn, int64(mr)}, [2]int64{rn, int64(rr)}, "trace %d step %d: window %v, %d hits at %v", trace, step, w, hits, now)
		}
	}
}

func TestACounterKeyLivesToItsWindowsEndAndTheGrace(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	s := newStore(t, rs.Addr())
	now := time.Now()
	_, reset, err := s.CountWindow(context.Background(), service.CountRequest{Key: "ttl", Window: time.Minute, Hits: 1, Now: now})
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
	rs := redistest.Start(t)
	s := newStore(t, rs.Addr())
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

// In Redis, the permit set lives on its own clock (TIME): a lease ends in real time, and the
// set's key expires with its last lease, so an abandoned key leaves nothing behind.
func TestARedisPermitSetExpiresWithItsLastLease(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	s := newStore(t, rs.Addr())
	ctx := context.Background()
	for id, lease := range map[string]time.Duration{"a": 200 * time.Millisecond, "b": 600 * time.Millisecond} {
		r, err := s.Acquire(ctx, service.PermitRequest{Key: "gpu", Permit: id, Limit: 2, Lease: lease})
		require.NoError(t, err)
		require.True(t, r.Allowed)
	}
	r, err := s.Acquire(ctx, service.PermitRequest{Key: "gpu", Permit: "c", Limit: 2, Lease: 100 * time.Millisecond})
	require.NoError(t, err)
	assert.False(t, r.Allowed)
	pttl, err := rs.Do("PTTL", s.permitKey("gpu"))
	require.NoError(t, err)
	ms, err := strconv.Atoi(pttl)
	require.NoError(t, err, pttl)
	assert.True(t, ms > 300 && ms <= 601, "the key lives as long as its last lease: PTTL %d ms", ms)
	redistest.WaitFor(t, 2*time.Second, "a's lease ends and a new permit is admitted in its place", func() bool {
		r, err := s.Acquire(ctx, service.PermitRequest{Key: "gpu", Permit: "c", Limit: 2, Lease: 100 * time.Millisecond})
		require.NoError(t, err)
		if r.Allowed {
			assert.Equal(t, service.PermitResult{Allowed: true, Held: 2, Reclaimed: 1}, r)
		}
		return r.Allowed
	})
	redistest.WaitFor(t, 2*time.Second, "the key expires", func() bool {
		n, err := rs.Do("EXISTS", s.permitKey("gpu"))
		return err == nil && n == "0"
	})
}

// Redis must not forget a key in debt: a settled over-run, and the denied decisions that follow
// it, keep the state until its TAT (a PEXPIRE of the bare τ would forgive the debt early).
func TestARedisKeyInDebtOutlivesTheDecisionTTL(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	s := newStore(t, rs.Addr())
	ctx := context.Background()
	l := algorithms.Limit{Kind: algorithms.TokenBucket, Quota: 10, Window: time.Second}
	req := service.Request{Key: "debtor", Limit: l, Cost: 10}
	pttl := func() int64 {
		t.Helper()
		ms, err := s.client.Do(ctx, s.client.B().Pttl().Key(s.stateKey(l.Kind, req.Key)).Build()).AsInt64()
		require.NoError(t, err)
		return ms
	}
	d, err := s.Decide(ctx, req)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	assert.LessOrEqual(t, pttl(), int64(1000), "a decision keeps the TTL of τ")
	_, err = s.Settle(ctx, service.SettleRequest{Key: "debtor", Limit: l, Delta: 10})
	require.NoError(t, err)
	assert.Greater(t, pttl(), int64(1500), "the debt doubles the time to the TAT")
	d, err = s.Decide(ctx, service.Request{Key: "debtor", Limit: l, Cost: 1})
	require.NoError(t, err)
	require.False(t, d.Allowed)
	assert.Greater(t, pttl(), int64(1500), "a denied decision keeps the debt's expiry")
}

// The reset log is bounded in Redis too: its sorted set holds no more than the log's size.
func TestRedisHoldsNoMoreOfTheResetLogThanItsSize(t *testing.T) {
	t.Parallel()
	s := newStore(t, redistest.Start(t).Addr())
	ctx := context.Background()
	keys := make([]string, 3*service.ResetLogSize/2)
	for i := range keys {
		keys[i] = "ns.p/login/7/user-" + strconv.Itoa(i)
	}
	_, err := s.AppendResets(ctx, keys)
	require.NoError(t, err)
	n, err := s.client.Do(ctx, s.client.B().Zcard().Key(s.resetKeys()[1]).Build()).AsInt64()
	require.NoError(t, err)
	assert.Equal(t, int64(service.ResetLogSize), n)
}

// BenchmarkRedisDecide measures one token-bucket decision against a loopback redis-server, one
// at a time, with its per-check deadline: the Go side's allocations per decision, and a round
// trip that nothing else shares.
func BenchmarkRedisDecide(b *testing.B) {
	s := newStore(b, redistest.Start(b).Addr())
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = "user-" + strconv.Itoa(i)
	}
	l := algorithms.Limit{Kind: algorithms.TokenBucket, Quota: 1e9, Window: time.Second}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		if _, err := s.Decide(ctx, service.Request{Key: keys[i%len(keys)], Limit: l, Cost: 1}); err != nil {
			b.Fatal(err)
		}
		cancel()
	}
}

// BenchmarkRedisPermitAcquireRelease measures one permit's life in the store: the acquire and
// the release, two script calls to a loopback redis-server, as a check's permit and its
// stream's end cost.
func BenchmarkRedisPermitAcquireRelease(b *testing.B) {
	s := newStore(b, redistest.Start(b).Addr())
	ctx := context.Background()
	req := service.PermitRequest{Key: "bench", Limit: 1000, Lease: 5 * time.Second}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		req.Permit = strconv.Itoa(i)
		if r, err := s.Acquire(ctx, req); err != nil || !r.Allowed {
			b.Fatal(err, r)
		}
		if held, err := s.Release(ctx, req); err != nil || !held {
			b.Fatal(err, held)
		}
	}
}

// BenchmarkRedisReserveThenSettle measures one reservation and its settle (a refund of part of
// it) on a loopback redis-server: two scripts.
func BenchmarkRedisReserveThenSettle(b *testing.B) {
	s := newStore(b, redistest.Start(b).Addr())
	ctx := context.Background()
	l := algorithms.Limit{Kind: algorithms.TokenBucket, Quota: algorithms.MaxQuota, Window: time.Hour}
	b.ReportAllocs()
	for b.Loop() {
		if d, err := s.Decide(ctx, service.Request{Key: "bench", Limit: l, Cost: 500}); err != nil || !d.Allowed {
			b.Fatal(err, d)
		}
		if _, err := s.Settle(ctx, service.SettleRequest{Key: "bench", Limit: l, Delta: -380}); err != nil {
			b.Fatal(err)
		}
	}
}
