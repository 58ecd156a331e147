package storetest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/service"
)

// testUndos checks Settle with Undo, for every kind: an admission given back (of a request then
// denied) leaves the key as if the request had never come, whatever was admitted since; and an
// undo that gives nothing (delta >= 0) is refused before the store is touched.
func testUndos(t *testing.T, s service.Store) {
	ctx := context.Background()
	t0 := time.Unix(1_800_000_000, 0)
	for _, l := range limits {
		name := fmt.Sprintf("%v burst %d", l.Kind, l.Burst)
		key := "undo " + name
		decide := func(at time.Time, cost int64) bool {
			t.Helper()
			d, err := s.Decide(ctx, service.Request{Key: key, Limit: l, Cost: cost, Now: at})
			require.NoError(t, err)
			return d.Allowed
		}
		undo := func(at time.Time, cost int64, age time.Duration) {
			t.Helper()
			require.NoError(t, s.Settle(ctx, service.SettleRequest{Key: key, Limit: l, Delta: -cost, Age: age, Now: at, Undo: true}))
		}
		t.Run(name+" gives back an admission exactly", func(t *testing.T) {
			c := l.Capacity()
			require.True(t, decide(t0, 2), "the admission given back later")
			t1 := t0.Add(time.Millisecond)
			require.True(t, decide(t1, c-2), "the rest of the capacity, admitted since")
			assert.False(t, decide(t1, 1), "nothing left")
			undo(t1, 2, time.Millisecond)
			assert.True(t, decide(t1, 2), "the 2 given back are admitted again")
			assert.False(t, decide(t1, 1), "and no more than them")
		})
	}
	t.Run("an undo must give back a cost", func(t *testing.T) {
		for _, delta := range []int64{0, 1} {
			err := s.Settle(ctx, service.SettleRequest{Key: "k", Limit: limits[4], Delta: delta, Undo: true})
			assert.ErrorContains(t, err, "delta must be < 0", "delta %d", delta)
		}
	})
}
