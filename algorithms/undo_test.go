package algorithms

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var undoLimits = []Limit{
	{Kind: TokenBucket, Quota: 10, Window: time.Minute},
	{Kind: LeakyBucket, Quota: 10, Window: time.Minute},
	{Kind: FixedWindow, Quota: 10, Window: time.Minute},
	{Kind: SlidingLog, Quota: 10, Window: time.Minute},
	{Kind: SlidingWindow, Quota: 10, Window: time.Minute},
}

// decideAll runs admissions of the given costs at t and returns the state.
func decideAll(t *testing.T, l Limit, state []byte, at int64, costs ...int64) []byte {
	t.Helper()
	for _, c := range costs {
		next, d, err := l.Decide(state, at, c, nil)
		require.NoError(t, err)
		require.True(t, d.Allowed)
		state = next
	}
	return state
}

func remaining(t *testing.T, l Limit, state []byte, at int64) int64 {
	t.Helper()
	p, err := l.Peek(state, at)
	require.NoError(t, err)
	return p.Remaining
}

func TestUndoGivesBackExactlyWhatAnAdmissionTookForEveryKind(t *testing.T) {
	t0 := int64(1_700_000_000_000_000_000) + int64(10*time.Second)
	for _, l := range undoLimits {
		t.Run(limitName(l), func(t *testing.T) {
			tests := []struct {
				name   string
				before []int64 // admitted before the undone one
				undone int64
				after  []int64 // admitted after it, at the same instant (another VM)
			}{
				{"an admission alone is given back in full", nil, 3, nil},
				{"an admission after others gives back only its own cost", []int64{2, 1}, 4, nil},
				{"an admission followed by another VM's gives back only its own", []int64{1}, 2, []int64{5}},
			}
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					without := decideAll(t, l, nil, t0, append(append([]int64{}, tt.before...), tt.after...)...)
					with := decideAll(t, l, nil, t0, tt.before...)
					with = decideAll(t, l, with, t0, tt.undone)
					with = decideAll(t, l, with, t0, tt.after...)
					undone, err := l.Undo(with, t0, t0, tt.undone, nil)
					require.NoError(t, err)
					for _, later := range []time.Duration{0, 7 * time.Second, 30 * time.Second, 65 * time.Second} {
						at := t0 + int64(later)
						assert.Equal(t, remaining(t, l, without, at), remaining(t, l, undone, at), "%v later", later)
					}
				})
			}
		})
	}
}

func TestUndoInPlaceGivesTheSameStateAsIntoAnotherBuffer(t *testing.T) {
	t0 := int64(1_700_000_000_000_000_000)
	for _, l := range undoLimits {
		t.Run(limitName(l), func(t *testing.T) {
			state := decideAll(t, l, nil, t0, 2, 3)
			state = decideAll(t, l, state, t0+int64(time.Second), 4)
			fresh, err := l.Undo(state, t0+int64(time.Second), t0, 3, nil)
			require.NoError(t, err)
			inPlace, err := l.Undo(append([]byte(nil), state...), t0+int64(time.Second), t0, 3, state)
			require.NoError(t, err)
			assert.Equal(t, fresh, inPlace)
		})
	}
}

func TestUndoOfAnAdmissionWhoseWindowIsGoneGivesNothingBack(t *testing.T) {
	t0 := int64(1_700_000_000_000_000_000)
	for _, l := range []Limit{undoLimits[2], undoLimits[3], undoLimits[4]} {
		t.Run(limitName(l), func(t *testing.T) {
			state := decideAll(t, l, nil, t0, 3)
			later := t0 + int64(3*time.Minute)
			state = decideAll(t, l, state, later, 4)
			undone, err := l.Undo(state, later, t0, 3, nil)
			require.NoError(t, err)
			assert.Equal(t, int64(6), remaining(t, l, undone, later))
		})
	}
}

func TestUndoRefusesACostBelowOne(t *testing.T) {
	_, err := undoLimits[0].Undo(nil, 1, 1, 0, nil)
	assert.ErrorContains(t, err, "undo cost")
}

// A sliding log's undo gives back only from the entries stamped at its admission's time: never
// more than they are, never from a later admission's, so a repeated undo (or one asking for more
// than its admission took) gives nothing more back, and GiveBack reports what it gave.
func TestARepeatedUndoOfASlidingLogAdmissionGivesNothingMoreBack(t *testing.T) {
	l := undoLimits[3]
	t0 := int64(1_700_000_000_000_000_000)
	t1 := t0 + int64(time.Millisecond)
	state := decideAll(t, l, nil, t0, 2)
	state = decideAll(t, l, state, t1, 3)
	for i, c := range []struct {
		cost, given, remaining int64
	}{{3, 2, 7}, {2, 0, 7}, {1, 0, 7}} {
		next, given, err := l.GiveBack(state, t1, t0, c.cost, true, nil)
		require.NoError(t, err)
		assert.Equal(t, c.given, given, "undo %d of %d units", i, c.cost)
		assert.Equal(t, c.remaining, remaining(t, l, next, t1), "undo %d: the admission at t1 keeps its 3", i)
		state = next
	}
	_, given, err := l.GiveBack(state, t1, t0+1000, 1, true, nil)
	require.NoError(t, err)
	assert.Zero(t, given, "a time no admission had gives nothing back")
	_, given, err = l.GiveBack(state, t1, t0+1000, 5, false, nil)
	require.NoError(t, err)
	assert.Equal(t, int64(3), given, "by age: the first run at or after the time, and only it")
}
