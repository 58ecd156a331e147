package rls

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

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
