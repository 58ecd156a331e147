package rls

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/meshlimit/meshlimit/algorithms"
	"github.com/meshlimit/meshlimit/service"
)

// barrierStore lets a Decide or a CountWindow through only once n are in flight together (or
// fails it after a second): a sequential caller fails, a concurrent one passes.
type barrierStore struct {
	service.Store
	n    int
	mu   sync.Mutex
	in   int
	open chan struct{}
}

func (b *barrierStore) Decide(ctx context.Context, r service.Request) (algorithms.Decision, error) {
	if err := b.wait(); err != nil {
		return algorithms.Decision{}, err
	}
	return b.Store.Decide(ctx, r)
}

func (b *barrierStore) CountWindow(ctx context.Context, r service.CountRequest) (int64, time.Duration, error) {
	if err := b.wait(); err != nil {
		return 0, 0, err
	}
	return b.Store.CountWindow(ctx, r)
}

// wait returns once n calls are in flight together, or an error after a second.
func (b *barrierStore) wait() error {
	b.mu.Lock()
	if b.in++; b.in == b.n {
		close(b.open)
	}
	b.mu.Unlock()
	select {
	case <-b.open:
		return nil
	case <-time.After(time.Second):
		return errors.New("not concurrent")
	}
}

func TestDistinctCountersOfARequestAreCountedTogether(t *testing.T) {
	f := newFixture(t, &barrierStore{Store: memoryStore(t), n: 3, open: make(chan struct{})}, HeadersOff)
	resp := f.call(req("edge_proxy_per_ip", desc("remote_address", "1.1.1.1"), desc("remote_address", "2.2.2.2"), desc("remote_address", "3.3.3.3")))
	for i, s := range resp.GetStatuses() {
		assert.Equal(t, st{ok, 10, 9, 1}, summarize(s), "descriptor %d", i)
	}
}

func TestACounterSharedWithinARequestIsChargedInRequestOrder(t *testing.T) {
	f := newFixture(t, memoryStore(t), HeadersOff)
	resp := f.call(req("internal", desc("azure", "x"), desc("ldap", "y"), withHits(desc("azure", "x"), 5), desc("mongo", "z"), desc("azure", "x")))
	var got []uint32
	for _, s := range resp.GetStatuses() {
		got = append(got, s.GetLimitRemaining())
	}
	assert.Equal(t, []uint32{99, 4294967295, 94, 0, 93}, got)
}

func TestAStoreErrorInAnyDescriptorFailsTheRequest(t *testing.T) {
	f := newFixture(t, failingStore{memoryStore(t)}, HeadersOff)
	_, err := f.client.ShouldRateLimit(context.Background(), req("edge_proxy_per_ip", desc("remote_address", "1.1.1.1"), desc("remote_address", "2.2.2.2")))
	require.Error(t, err)
}

// batchStore counts the batches and the single counts made through it; it is a
// service.BatchCounter over its store's.
type batchStore struct {
	service.Store
	batches, singles atomic.Int64
	fail             error
}

func (b *batchStore) CountWindow(ctx context.Context, r service.CountRequest) (int64, time.Duration, error) {
	b.singles.Add(1)
	return b.Store.CountWindow(ctx, r)
}

func (b *batchStore) CountWindows(ctx context.Context, reqs []service.CountRequest, out []service.CountResult) error {
	b.batches.Add(1)
	if b.fail != nil {
		return b.fail
	}
	return service.CountWindows(ctx, b.Store, reqs, out)
}

func TestSixteenDescriptorsAreCountedInOneStoreCall(t *testing.T) {
	store := &batchStore{Store: memoryStore(t)}
	f := newFixture(t, store, HeadersOff)
	resp := f.call(req("edge_proxy_per_ip", manyDescriptors(16)...))
	require.Len(t, resp.GetStatuses(), 16)
	for i, s := range resp.GetStatuses() {
		assert.Equal(t, st{ok, 10, 9, 1}, summarize(s), "descriptor %d", i)
	}
	assert.Equal(t, int64(1), store.batches.Load(), "one batch for the sixteen counters")
	assert.Zero(t, store.singles.Load(), "no counter counted on its own")
}

func TestABatchedCounterSharedWithinARequestIsChargedInRequestOrder(t *testing.T) {
	store := &batchStore{Store: memoryStore(t)}
	f := newFixture(t, store, HeadersOff)
	resp := f.call(req("internal", desc("azure", "x"), desc("ldap", "y"), withHits(desc("azure", "x"), 5), desc("mongo", "z"), desc("azure", "x")))
	var got []uint32
	for _, s := range resp.GetStatuses() {
		got = append(got, s.GetLimitRemaining())
	}
	assert.Equal(t, []uint32{99, 4294967295, 94, 0, 93}, got)
	assert.Equal(t, int64(1), store.batches.Load())
}

func TestAFailedBatchFailsTheRequestUnavailable(t *testing.T) {
	f := newFixture(t, &batchStore{Store: memoryStore(t), fail: errors.New("store down")}, HeadersOff)
	_, err := f.client.ShouldRateLimit(context.Background(), req("edge_proxy_per_ip", manyDescriptors(3)...))
	assert.Equal(t, codes.Unavailable, status.Code(err))
}
