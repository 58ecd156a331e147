package rls

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/service"
)

func TestARequestTheGateCannotAdmitWholeCountsNoneOfItsDescriptors(t *testing.T) {
	tally := &countingStore{Store: memoryStore(t)}
	g := service.NewGate(tally, service.GateConfig{MaxWork: 2, StoreTimeout: time.Minute})
	f := newFixture(t, g, HeadersOff)
	// One of the two units is taken: each descriptor's call would fit alone, the request not.
	_, release, err := g.Admit(context.Background(), 1)
	require.NoError(t, err)
	defer release()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	go func() { // an algorithm and a window: two store calls, sent together
		_, err := f.client.ShouldRateLimit(ctx, req("units", desc("algo", "sliding"), desc("u", "w")))
		errc <- err
	}()
	for g.Queued() == 0 && tally.calls.Load() == 0 {
		runtime.Gosched()
	}
	cancel() // the caller gives up while the request waits for room
	require.Error(t, <-errc)
	for g.Stats().Overloaded == 0 && tally.calls.Load() == 0 {
		runtime.Gosched()
	}
	assert.Zero(t, tally.calls.Load(), "neither descriptor was counted")
}
