package service

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/wire"
)

// Both stores hold permits the same way: the contract below, on the store's own clock given
// explicitly, runs against the memory store and a real redis-server.
func TestPermitStoreContract(t *testing.T) {
	t.Parallel()
	rs := startRedis(t)
	for name, s := range map[string]PermitStore{
		"memory": NewMemoryStore(MemoryConfig{SweepInterval: -1}),
		"redis":  newRedisStore(t, rs.Addr()),
	} {
		t.Run(name, func(t *testing.T) { testPermitContract(t, s) })
	}
}

func testPermitContract(t *testing.T, s PermitStore) {
	ctx := context.Background()
	t0 := time.UnixMicro(1_800_000_000_000_000)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	acquire := func(key, id string, now time.Time) PermitResult {
		t.Helper()
		r, err := s.Acquire(ctx, PermitRequest{Key: key, Permit: id, Limit: 2, Lease: time.Second, Now: now})
		require.NoError(t, err)
		return r
	}
	t.Run("at most the limit are held at once, and a release frees one", func(t *testing.T) {
		assert.Equal(t, PermitResult{Allowed: true, Held: 1}, acquire("bound", "a", at(0)))
		assert.Equal(t, PermitResult{Allowed: true, Held: 2}, acquire("bound", "b", at(0)))
		assert.Equal(t, PermitResult{Allowed: false, Held: 2}, acquire("bound", "c", at(0)))
		held, err := s.Release(ctx, PermitRequest{Key: "bound", Permit: "a"})
		require.NoError(t, err)
		assert.True(t, held)
		assert.Equal(t, PermitResult{Allowed: true, Held: 2}, acquire("bound", "c", at(0)))
	})
	t.Run("a retried acquire of a held permit is admitted and counted once", func(t *testing.T) {
		acquire("retry", "a", at(0))
		assert.Equal(t, PermitResult{Allowed: true, Held: 1}, acquire("retry", "a", at(time.Millisecond)))
		assert.Equal(t, PermitResult{Allowed: true, Held: 2}, acquire("retry", "b", at(time.Millisecond)))
	})
	t.Run("a permit neither renewed nor released is reclaimed at the end of its lease", func(t *testing.T) {
		acquire("lease", "a", at(0))
		acquire("lease", "b", at(500*time.Millisecond))
		assert.False(t, acquire("lease", "c", at(999*time.Millisecond)).Allowed, "a's lease has not ended")
		assert.Equal(t, PermitResult{Allowed: true, Held: 2, Reclaimed: 1}, acquire("lease", "c", at(time.Second)))
		renewed, err := s.Renew(ctx, PermitRequest{Key: "lease", Permit: "a", Lease: time.Second, Now: at(time.Second)})
		require.NoError(t, err)
		assert.False(t, renewed, "a reclaimed permit is not renewed: its slot is c's")
	})
	t.Run("a renewed permit outlives its first lease", func(t *testing.T) {
		acquire("renew", "a", at(0))
		renewed, err := s.Renew(ctx, PermitRequest{Key: "renew", Permit: "a", Lease: time.Second, Now: at(900 * time.Millisecond)})
		require.NoError(t, err)
		assert.True(t, renewed)
		acquire("renew", "b", at(1800*time.Millisecond))
		assert.Equal(t, PermitResult{Allowed: false, Held: 2}, acquire("renew", "c", at(1800*time.Millisecond)))
		assert.Equal(t, PermitResult{Allowed: true, Held: 2, Reclaimed: 1}, acquire("renew", "c", at(1900*time.Millisecond)))
	})
	t.Run("releasing a permit that is not held changes nothing", func(t *testing.T) {
		acquire("twice", "a", at(0))
		for i, want := range []bool{true, false} {
			held, err := s.Release(ctx, PermitRequest{Key: "twice", Permit: "a"})
			require.NoError(t, err)
			assert.Equal(t, want, held, "release %d", i)
		}
		held, err := s.Release(ctx, PermitRequest{Key: "never", Permit: "x"})
		require.NoError(t, err)
		assert.False(t, held)
	})
	t.Run("keys do not share permits", func(t *testing.T) {
		acquire("k1", "a", at(0))
		acquire("k1", "b", at(0))
		assert.True(t, acquire("k2", "a", at(0)).Allowed)
	})
	t.Run("a request without a key, an id or a lease is refused", func(t *testing.T) {
		_, err := s.Acquire(ctx, PermitRequest{Key: "k", Permit: "a", Limit: 1})
		assert.Error(t, err)
		_, err = s.Acquire(ctx, PermitRequest{Key: "k", Limit: 1, Lease: time.Second})
		assert.Error(t, err)
		_, err = s.Acquire(ctx, PermitRequest{Key: "k", Permit: "a", Lease: time.Second})
		assert.Error(t, err)
		_, err = s.Release(ctx, PermitRequest{Permit: "a"})
		assert.Error(t, err)
	})
}

// In Redis, the permit set lives on its own clock (TIME): a lease ends in real time, and the
// set's key expires with its last lease, so an abandoned key leaves nothing behind.
func TestARedisPermitSetExpiresWithItsLastLease(t *testing.T) {
	t.Parallel()
	rs := startRedis(t)
	s := newRedisStore(t, rs.Addr())
	ctx := context.Background()
	for id, lease := range map[string]time.Duration{"a": 200 * time.Millisecond, "b": 600 * time.Millisecond} {
		r, err := s.Acquire(ctx, PermitRequest{Key: "gpu", Permit: id, Limit: 2, Lease: lease})
		require.NoError(t, err)
		require.True(t, r.Allowed)
	}
	r, err := s.Acquire(ctx, PermitRequest{Key: "gpu", Permit: "c", Limit: 2, Lease: 100 * time.Millisecond})
	require.NoError(t, err)
	assert.False(t, r.Allowed)
	pttl, err := rs.Do("PTTL", s.PermitKey("gpu"))
	require.NoError(t, err)
	ms, err := strconv.Atoi(pttl)
	require.NoError(t, err, pttl)
	assert.True(t, ms > 300 && ms <= 601, "the key lives as long as its last lease: PTTL %d ms", ms)
	waitFor(t, 2*time.Second, "a's lease ends and a new permit is admitted in its place", func() bool {
		r, err := s.Acquire(ctx, PermitRequest{Key: "gpu", Permit: "c", Limit: 2, Lease: 100 * time.Millisecond})
		require.NoError(t, err)
		if r.Allowed {
			assert.Equal(t, PermitResult{Allowed: true, Held: 2, Reclaimed: 1}, r)
		}
		return r.Allowed
	})
	waitFor(t, 2*time.Second, "the key expires", func() bool {
		n, err := rs.Do("EXISTS", s.PermitKey("gpu"))
		return err == nil && n == "0"
	})
}

// A key's permits live in the Cluster slot of its counters (one hash tag), and every key's
// permits are bounded wherever its slot is.
func TestPermitsInARedisCluster(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t)
	s := newRedisStore(t, nodes[0].Addr())
	ctx := context.Background()
	for i := range 30 {
		key := fmt.Sprintf("tenant-%d}{x", i) // a brace in the key cannot choose the slot
		for j, want := range []bool{true, true, false} {
			r, err := s.Acquire(ctx, PermitRequest{Key: key, Permit: fmt.Sprint(j), Limit: 2, Lease: time.Minute})
			require.NoError(t, err)
			require.Equal(t, want, r.Allowed, "key %d permit %d", i, j)
		}
		held, err := s.Release(ctx, PermitRequest{Key: key, Permit: "0"})
		require.NoError(t, err)
		assert.True(t, held)
		renewed, err := s.Renew(ctx, PermitRequest{Key: key, Permit: "1", Lease: time.Minute})
		require.NoError(t, err)
		assert.True(t, renewed)
	}
	slot := func(k string) string {
		v, err := nodes[0].Do("CLUSTER", "KEYSLOT", k)
		require.NoError(t, err)
		return v
	}
	req := Request{Key: "tenant-7}{x", Limit: contractLimits[0]}
	assert.Equal(t, slot(s.Key(req)), slot(s.PermitKey(req.Key)))
	used := 0
	for _, n := range nodes {
		keys, err := n.Do("KEYS", "ml:*:concurrency:*")
		require.NoError(t, err)
		if keys != "" {
			used++
		}
	}
	assert.Equal(t, len(nodes), used, "the permit sets spread over every node")
}

// Two service replicas on one Redis hold one bound: 40 concurrent acquires of a limit of 7,
// half through each replica, admit exactly 7.
func TestTwoReplicasShareOneBound(t *testing.T) {
	t.Parallel()
	rs := startRedis(t)
	replicas := []*Handler{
		newTestHandler(t, Config{Store: newRedisStore(t, rs.Addr()), Timeout: time.Second}),
		newTestHandler(t, Config{Store: newRedisStore(t, rs.Addr()), Timeout: time.Second}),
	}
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := `{"descriptors":[{"key":"gpu","algorithm":"concurrency","quota":7,"permit":"p` + fmt.Sprint(i) + `","lease_ms":60000}]}`
			code, resp := serve(replicas[i%2], "POST", "/v1/check", body)
			if code == http.StatusOK && strings.HasPrefix(resp, `{"allowed":true`) {
				admitted.Add(1)
			}
		}()
	}
	wg.Wait()
	assert.Equal(t, int64(7), admitted.Load())
}

// A check that a later descriptor denies gives back the permit it acquired: a denied request
// holds nothing. The answer to a renew and release list counts what was held.
func TestADeniedCheckHoldsNoPermit(t *testing.T) {
	t.Parallel()
	h := newTestHandler(t, Config{})
	permit := func(id string) string {
		return `{"key":"gpu","algorithm":"concurrency","quota":1,"permit":"` + id + `","lease_ms":60000}`
	}
	rate := `{"key":"r","algorithm":"fixed_window","quota":1,"window_ms":60000}`
	check := func(body string) wire.Answer {
		t.Helper()
		code, resp := serve(h, "POST", "/v1/check", body)
		require.Equal(t, http.StatusOK, code, resp)
		a, err := wire.DecodeFullAnswer([]byte(resp), strings.Count(body, `"key"`), nil)
		require.NoError(t, err, resp)
		return a
	}
	assert.True(t, check(`{"descriptors":[`+rate+`]}`).Allowed, "the rate's one unit is used")
	a := check(`{"descriptors":[` + permit("a") + `,` + rate + `]}`)
	require.False(t, a.Allowed)
	assert.True(t, a.Decisions[0].Allowed, "the permit was acquired")
	assert.False(t, a.Decisions[1].Allowed, "the rate denied")
	b := check(`{"descriptors":[` + permit("b") + `]}`)
	assert.True(t, b.Allowed, "a's permit was given back when the rate denied")
	c := check(`{"descriptors":[` + permit("c") + `]}`)
	assert.False(t, c.Allowed)
	assert.Equal(t, wire.Decision{Limit: 1, RetryAfterMs: -1}, c.Decisions[0], "a permit denial promises no retry time")

	code, resp := serve(h, "POST", "/v1/check", `{"renew":[{"key":"gpu","permit":"b","lease_ms":1000},{"key":"gpu","permit":"a","lease_ms":1000}],"release":[{"key":"gpu","permit":"b"}]}`)
	require.Equal(t, http.StatusOK, code)
	assert.Equal(t, `{"allowed":true,"decisions":[],"renewed":0,"released":1,"lost":[0,1]}`+"\n", resp, "b is released before the renewals: none is held")
	_, m := serve(h, "GET", "/metrics", "")
	assert.Contains(t, m, `meshlimit_permits_total{result="lost"} 2`)
	assert.Contains(t, m, `meshlimit_decisions_total{algorithm="concurrency",result="denied"} 1`)
}

// A Redis restart loses the permits, as it loses the counters (the shipped Redis keeps no
// persistence): while it is down every permit operation fails (the filter applies its
// fallback), and afterwards a renewal finds its permit gone (counted lost) and new acquires
// start from none held.
func TestARedisRestartLosesThePermits(t *testing.T) {
	t.Parallel()
	rs := startRedis(t)
	s := newRedisStore(t, rs.Addr())
	h := newTestHandler(t, Config{Store: s, Timeout: 10 * time.Second}) // a stopped Redis fails at once; a slow one never reaches it
	acquire := func(id string) (int, string) {
		return serve(h, "POST", "/v1/check", `{"descriptors":[{"key":"gpu","algorithm":"concurrency","quota":1,"permit":"`+id+`","lease_ms":60000}]}`)
	}
	code, resp := acquire("a")
	require.Equal(t, http.StatusOK, code)
	require.True(t, strings.HasPrefix(resp, `{"allowed":true`), resp)
	rs.Stop()
	code, resp = acquire("b")
	assert.Equal(t, http.StatusServiceUnavailable, code, resp)
	code, _ = serve(h, "POST", "/v1/check", `{"release":[{"key":"gpu","permit":"a"}]}`)
	assert.Equal(t, http.StatusServiceUnavailable, code)
	rs.Start()
	waitFor(t, 5*time.Second, "a permit is admitted after the restart", func() bool {
		code, resp := acquire("b")
		return code == http.StatusOK && strings.HasPrefix(resp, `{"allowed":true`)
	})
	waitFor(t, 5*time.Second, "a renewal is answered after the restart", func() bool {
		code, resp = serve(h, "POST", "/v1/check", `{"renew":[{"key":"gpu","permit":"a","lease_ms":1000}]}`)
		return code == http.StatusOK
	})
	assert.Contains(t, resp, `"renewed":0`, "a's permit went with the restart")
}

// The memory store's permits are bounded like its counters: expired permits are swept, and a
// flood of keys with permits held never grows the store past MaxKeys.
func TestMemoryStorePermitsAreSweptAndBounded(t *testing.T) {
	t.Parallel()
	s := NewMemoryStore(MemoryConfig{SweepInterval: -1, MaxKeys: 64})
	ctx := context.Background()
	t0 := time.UnixMicro(1_800_000_000_000_000)
	for i := range 1000 {
		_, err := s.Acquire(ctx, PermitRequest{Key: fmt.Sprint("k", i), Permit: "a", Limit: 1, Lease: time.Second, Now: t0})
		require.NoError(t, err)
	}
	assert.LessOrEqual(t, s.Len(), 64)
	assert.Zero(t, s.sweepPermits(t0.Add(time.Second-1).UnixNano()), "no lease has ended")
	assert.Equal(t, s.Len(), s.sweepPermits(t0.Add(time.Second).UnixNano()))
	assert.Zero(t, s.Len())
}

// BenchmarkRedisPermitAcquireRelease measures one permit's life in the service's store: the
// acquire and the release, two script calls to a loopback redis-server, as a check's permit and
// its stream's end cost.
func BenchmarkRedisPermitAcquireRelease(b *testing.B) {
	rs := startRedis(b)
	s := newRedisStore(b, rs.Addr())
	ctx := context.Background()
	req := PermitRequest{Key: "bench", Limit: 1000, Lease: 5 * time.Second}
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
