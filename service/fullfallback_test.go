package service_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/algorithms"
	"github.com/meshlimit/meshlimit/service"
	"github.com/meshlimit/meshlimit/service/memstore"
)

// fullStore is a primary store that is full: every Decide is refused as ErrStoreFull, as a
// full Redis refuses a new key.
type fullStore struct{ service.Store }

func (fullStore) Decide(context.Context, service.Request) (algorithms.Decision, error) {
	return algorithms.Decision{}, service.ErrStoreFull
}

func (fullStore) Stats() service.Stats { return service.Stats{} }
func (fullStore) Close() error         { return nil }

// Review r21 F4: while Redis was full, 3000 new keys of a longer window evicted an exhausted
// client's counter from the in-memory fallback (-max-keys 1000), and the client was allowed
// 3 more times. Now the fallback never forgets a counter before it is full again: past
// MaxKeys held keys, the newcomers are denied, and the exhausted client stays denied.
func TestAFloodOfNewKeysWhileRedisIsFullNeverResetsAnExhaustedClient(t *testing.T) {
	const maxKeys = 1000
	now := time.Unix(1_700_000_000, 0)
	local := memstore.New(memstore.Config{MaxKeys: service.LocalMaxKeys(maxKeys), SweepInterval: -1})
	f := &service.FullFallback{Store: fullStore{}, Local: local, MaxKeys: maxKeys, Now: func() time.Time { return now }}
	ctx := context.Background()
	victim := algorithms.Limit{Kind: algorithms.FixedWindow, Quota: 3, Window: time.Hour}
	for i := range 4 {
		d, err := f.Decide(ctx, service.Request{Key: "victim", Limit: victim, Cost: 1})
		require.NoError(t, err)
		require.Equal(t, i < 3, d.Allowed, "victim decision %d", i)
	}
	flood := algorithms.Limit{Kind: algorithms.FixedWindow, Quota: 3, Window: 400 * 24 * time.Hour}
	deniedNewcomers := 0
	for i := range 3 * maxKeys {
		d, err := f.Decide(ctx, service.Request{Key: "flood/" + strconv.Itoa(i), Limit: flood, Cost: 1})
		require.NoError(t, err)
		if !d.Allowed {
			assert.Positive(t, d.RetryAfter, "a refused newcomer is told when to retry")
			deniedNewcomers++
		}
	}
	assert.Equal(t, 3*maxKeys-(maxKeys-1), deniedNewcomers, "the newcomers past MaxKeys are denied")
	for i := range 3 {
		d, err := f.Decide(ctx, service.Request{Key: "victim", Limit: victim, Cost: 1})
		require.NoError(t, err)
		assert.False(t, d.Allowed, "the exhausted victim stays denied (call %d after the flood)", i)
	}
	now = now.Add(time.Hour) // the victim's window is over: its counter is full again
	d, err := f.Decide(ctx, service.Request{Key: "victim", Limit: victim, Cost: 1})
	require.NoError(t, err)
	assert.True(t, d.Allowed, "the victim's next window")
}
