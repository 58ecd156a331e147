package memstore

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/algorithms"
	"github.com/meshlimit/meshlimit/service"
	"github.com/meshlimit/meshlimit/service/storetest"
)

func TestTheMemoryStoreKeepsTheStoreContract(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) service.Store {
		s := New(Config{})
		t.Cleanup(func() { s.Close() })
		return s
	})
}

func TestMemoryStoreSweepsIdleKeys(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_800_000_000, 0)
	s := New(Config{SweepInterval: -1, Clock: func() time.Time { return now }})
	defer s.Close()
	ctx := context.Background()
	short := algorithms.Limit{Kind: algorithms.TokenBucket, Quota: 10, Window: time.Second}
	long := algorithms.Limit{Kind: algorithms.FixedWindow, Quota: 10, Window: time.Hour}
	for i := range 50 {
		_, err := s.Decide(ctx, service.Request{Key: "short" + strconv.Itoa(i), Limit: short, Cost: 1})
		require.NoError(t, err)
		_, err = s.Decide(ctx, service.Request{Key: "long" + strconv.Itoa(i), Limit: long, Cost: 1})
		require.NoError(t, err)
	}
	require.Equal(t, 100, s.Stats().Keys)
	assert.Zero(t, s.sweep(now.UnixNano()), "nothing is idle yet")
	// A token bucket charged 1 of 10 per second is full again after 100ms.
	assert.Equal(t, 50, s.sweep(now.Add(100*time.Millisecond).UnixNano()))
	assert.Equal(t, 50, s.Stats().Keys)
	assert.Equal(t, 50, s.sweep(now.Add(time.Hour).UnixNano()), "the next window")
	assert.Zero(t, s.Stats().Keys)
}

func TestMemoryStoreBoundsKeys(t *testing.T) {
	t.Parallel()
	s := New(Config{MaxKeys: numShards * 4, SweepInterval: -1})
	defer s.Close()
	l := algorithms.Limit{Kind: algorithms.FixedWindow, Quota: 10, Window: time.Hour}
	for i := range 10_000 {
		_, err := s.Decide(context.Background(), service.Request{Key: strconv.Itoa(i), Limit: l, Cost: 1})
		require.NoError(t, err)
	}
	assert.LessOrEqual(t, s.Stats().Keys, numShards*4)
}

func TestMemoryStoreSweepStopsOnClose(t *testing.T) {
	t.Parallel()
	s := New(Config{SweepInterval: time.Millisecond})
	time.Sleep(5 * time.Millisecond)
	require.NoError(t, s.Close())
	require.NoError(t, s.Close(), "Close is idempotent")
	select {
	case <-s.done:
	default:
		t.Fatal("the sweep goroutine is still running")
	}
}

// The memory store's permits are bounded like its counters: expired permits are swept, and a
// flood of keys with permits held never grows the store past MaxKeys.
func TestMemoryStorePermitsAreSweptAndBounded(t *testing.T) {
	t.Parallel()
	s := New(Config{SweepInterval: -1, MaxKeys: 64})
	ctx := context.Background()
	t0 := time.UnixMicro(1_800_000_000_000_000)
	for i := range 1000 {
		_, err := s.Acquire(ctx, service.PermitRequest{Key: fmt.Sprint("k", i), Permit: "a", Limit: 1, Lease: time.Second, Now: t0})
		require.NoError(t, err)
	}
	assert.LessOrEqual(t, s.Stats().Keys, 64)
	assert.Zero(t, s.sweepPermits(t0.Add(time.Second-1).UnixNano()), "no lease has ended")
	assert.Equal(t, s.Stats().Keys, s.sweepPermits(t0.Add(time.Second).UnixNano()))
	assert.Zero(t, s.Stats().Keys)
}
