package storetest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/algorithms"
	"github.com/meshlimit/meshlimit/service"
)

// testUndosAtTheDecisionsTime checks that a decision reports the store's time it decided at
// (Decision.At) and that an undo naming it (SettleRequest.At) gives the admission back into the
// window that took it, however soon after the window began it was and however late the undo
// comes (within the window): for every kind, and for a calendar day, 100 ms into the window and
// undone 150 ms later, when no age that covers the undo's trip (the filter's call timeout) could
// name the window.
func testUndosAtTheDecisionsTime(t *testing.T, s service.Store) {
	ctx := context.Background()
	start := time.Date(2027, 1, 15, 0, 0, 0, 0, time.UTC) // a day's start, and an hour's
	day := algorithms.Limit{Kind: algorithms.FixedWindow, Quota: 5, Calendar: algorithms.Calendar{Unit: algorithms.CalendarDay}}
	for _, l := range append(append([]algorithms.Limit(nil), limits...), day) {
		name := fmt.Sprintf("%v burst %d", l.Kind, l.Burst)
		if l.Calendar.Unit != 0 {
			name += " of a calendar day"
		}
		t.Run(name+" gives back an admission early in its window at the decision's time", func(t *testing.T) {
			key := "undo at the decision's time " + name
			at := start.Add(100 * time.Millisecond)
			d, err := s.Decide(ctx, service.Request{Key: key, Limit: l, Cost: l.Capacity(), Now: at})
			require.NoError(t, err)
			require.True(t, d.Allowed, "the whole capacity, 100 ms into the window")
			require.Equal(t, at.UnixNano(), d.At, "the decision reports its time")
			later := at.Add(150 * time.Millisecond)
			undo := service.SettleRequest{Key: key, Limit: l, Delta: -l.Capacity(), At: time.Unix(0, d.At), Now: later, Undo: true}
			require.NoError(t, errOf(s.Settle(ctx, undo)))
			d, err = s.Decide(ctx, service.Request{Key: key, Limit: l, Cost: l.Capacity(), Now: later})
			require.NoError(t, err)
			assert.True(t, d.Allowed, "all of it was given back, into the window that took it")
		})
	}
	t.Run("a decision on the store's clock reports that clock's time, which its undo names", func(t *testing.T) {
		l, key := limits[3], "undo at the store's time"
		d, err := s.Decide(ctx, service.Request{Key: key, Limit: l, Cost: l.Quota})
		require.NoError(t, err)
		require.True(t, d.Allowed)
		require.Positive(t, d.At)
		require.NoError(t, errOf(s.Settle(ctx, service.SettleRequest{Key: key, Limit: l, Delta: -l.Quota, At: time.Unix(0, d.At), Undo: true})))
		d, err = s.Decide(ctx, service.Request{Key: key, Limit: l, Cost: l.Quota})
		require.NoError(t, err)
		assert.True(t, d.Allowed, "given back (or, past the window's end, a fresh window)")
	})
}
