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
			require.NoError(t, errOf(s.Settle(ctx, service.SettleRequest{Key: key, Limit: l, Delta: -cost, Age: age, Now: at, Undo: true})))
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
	testUndosAcrossAWindowsStart(t, s, t0)
	testUndosAtTheDecisionsTime(t, s)
	testSlidingLogUndos(t, s)
	t.Run("an undo must give back a cost", func(t *testing.T) {
		for _, delta := range []int64{0, 1} {
			err := errOf(s.Settle(ctx, service.SettleRequest{Key: "k", Limit: limits[4], Delta: delta, Undo: true}))
			assert.ErrorContains(t, err, "delta must be < 0", "delta %d", delta)
		}
	})
}

// testUndosAcrossAWindowsStart checks the windows' undo at their start: an undo gives back into
// the window that holds now - Age, so an admission undone with an age that reaches before its
// window began (the filter adds the call's timeout to the time since the check) gives nothing
// back, and the admission stays spent: the safe direction, never a unit given back into a window
// that did not count it. start must begin a window of the limits (an hour).
func testUndosAcrossAWindowsStart(t *testing.T, s service.Store, start time.Time) {
	ctx := context.Background()
	for _, l := range []algorithms.Limit{limits[3], limits[5]} {
		key := "undo across a window's start " + l.Kind.String()
		at := start.Add(100 * time.Millisecond) // 100 ms into the window
		t.Run(l.Kind.String()+" gives nothing back of an admission undone with an age reaching into the window before", func(t *testing.T) {
			d, err := s.Decide(ctx, service.Request{Key: key, Limit: l, Cost: l.Quota, Now: at})
			require.NoError(t, err)
			require.True(t, d.Allowed, "the whole quota, 100 ms into the window")
			undo := service.SettleRequest{Key: key, Limit: l, Delta: -l.Quota, Age: 200 * time.Millisecond, Now: at, Undo: true}
			require.NoError(t, errOf(s.Settle(ctx, undo)))
			d, err = s.Decide(ctx, service.Request{Key: key, Limit: l, Cost: 1, Now: at})
			require.NoError(t, err)
			assert.False(t, d.Allowed, "the undo's time, 100 ms before the window, gives back nothing of it")
			undo.Age = 100 * time.Millisecond
			require.NoError(t, errOf(s.Settle(ctx, undo)))
			d, err = s.Decide(ctx, service.Request{Key: key, Limit: l, Cost: l.Quota, Now: at})
			require.NoError(t, err)
			assert.True(t, d.Allowed, "an age reaching the window's start gives it all back")
		})
	}
}
