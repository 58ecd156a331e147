package service_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/algorithms"
	"github.com/meshlimit/meshlimit/service"
	"github.com/meshlimit/meshlimit/service/memstore"
)

// heldStore holds every decision call until release is closed, and records how many were in
// it at once; entered receives one value per call that got in.
type heldStore struct {
	service.Store
	release       chan struct{}
	entered       chan struct{}
	in, most, all atomic.Int64
}

func newHeldStore(t *testing.T) *heldStore {
	m := memstore.New(memstore.Config{SweepInterval: -1})
	t.Cleanup(func() { m.Close() })
	return &heldStore{Store: m, release: make(chan struct{}), entered: make(chan struct{}, 16)}
}

func (h *heldStore) hold() func() {
	h.all.Add(1)
	n := h.in.Add(1)
	for m := h.most.Load(); n > m && !h.most.CompareAndSwap(m, n); m = h.most.Load() {
	}
	h.entered <- struct{}{}
	<-h.release
	return func() { h.in.Add(-1) }
}

func (h *heldStore) Decide(ctx context.Context, r service.Request) (algorithms.Decision, error) {
	defer h.hold()()
	return h.Store.Decide(ctx, r)
}

func (h *heldStore) CountWindow(ctx context.Context, r service.CountRequest) (int64, time.Duration, error) {
	defer h.hold()()
	return h.Store.CountWindow(ctx, r)
}

var gateLimit = algorithms.Limit{Kind: algorithms.TokenBucket, Quota: 100, Window: time.Minute}

func TestAGateLetsNoMoreThanItsBoundOfCallsReachTheStore(t *testing.T) {
	h := newHeldStore(t)
	g := service.NewGate(h, 2)
	var wg sync.WaitGroup
	for i := range 5 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := g.Decide(context.Background(), service.Request{Key: string(rune('a' + i)), Limit: gateLimit, Cost: 1})
			assert.NoError(t, err)
		}()
	}
	<-h.entered
	<-h.entered
	close(h.release) // the queued three now go through, two at a time at most
	wg.Wait()
	assert.Equal(t, int64(5), h.all.Load(), "every queued call reached the store in the end")
	assert.Equal(t, int64(2), h.most.Load(), "never more than two in the store at once")
}

func TestACallWhoseDeadlinePassesInTheGatesQueueNeverReachesTheStore(t *testing.T) {
	h := newHeldStore(t)
	g := service.NewGate(h, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _, err := g.CountWindow(context.Background(), service.CountRequest{Key: "first", Window: time.Second, Hits: 1})
		assert.NoError(t, err)
	}()
	<-h.entered // the only slot is taken
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	_, err := g.Decide(ctx, service.Request{Key: "late", Limit: gateLimit, Cost: 1})
	require.ErrorIs(t, err, service.ErrOverloaded)
	assert.ErrorIs(t, err, context.DeadlineExceeded, "counted as a timeout, as a late store answer is")
	err = g.CountWindows(ctx, []service.CountRequest{{Key: "late", Window: time.Second, Hits: 1}}, make([]service.CountResult, 1))
	assert.ErrorIs(t, err, service.ErrOverloaded)
	close(h.release)
	<-done
	assert.Equal(t, int64(1), h.all.Load(), "only the first call reached the store")
	assert.Equal(t, int64(2), g.Stats().Overloaded)
	_, metrics := serve(newTestHandler(t, service.Config{Store: g}), "GET", "/metrics", "")
	assert.Contains(t, metrics, "meshlimit_store_overloaded_total 2\n")
}

func TestABatchThroughAGateTakesOneSlotAndCountsInOrder(t *testing.T) {
	m := memstore.New(memstore.Config{SweepInterval: -1})
	t.Cleanup(func() { m.Close() })
	g := service.NewGate(m, 1)
	now := time.Unix(1_700_000_000, 0)
	reqs := []service.CountRequest{{Key: "k", Window: time.Minute, Hits: 2, Now: now}, {Key: "k", Window: time.Minute, Hits: 3, Now: now}}
	out := make([]service.CountResult, 2)
	require.NoError(t, g.CountWindows(context.Background(), reqs, out))
	assert.Equal(t, []int64{2, 5}, []int64{out[0].Count, out[1].Count})
	var _ service.BatchCounter = g
}
