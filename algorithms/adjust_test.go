package algorithms

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// settleCase reserves `reserve` at t0, adjusts by delta at t0, then reports what a cost-1 request
// finds at t0 (Remaining after Peek).
func remainingAfterSettle(t *testing.T, l Limit, reserve, delta int64) int64 {
	t.Helper()
	t0 := int64(1_700_000_000_000_000_000)
	state, d, err := l.Decide(nil, t0, reserve, nil)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	state, err = l.Adjust(state, t0, t0, delta, nil)
	require.NoError(t, err)
	p, err := l.Peek(state, t0)
	require.NoError(t, err)
	return p.Remaining
}

func TestAdjustSettlesAReservationToItsRealCost(t *testing.T) {
	for _, l := range []Limit{
		{Kind: TokenBucket, Quota: 100, Window: time.Minute},
		{Kind: LeakyBucket, Quota: 100, Window: time.Minute},
		{Kind: FixedWindow, Quota: 100, Window: time.Minute},
		{Kind: FixedWindow, Quota: 100, Calendar: Calendar{Unit: CalendarMonth, Offset: 5*time.Hour + 30*time.Minute}},
	} {
		t.Run(limitName(l), func(t *testing.T) {
			tests := []struct {
				name           string
				reserve, delta int64
				remaining      int64
			}{
				{"an unused part of the reservation is refunded", 40, -30, 90},
				{"the whole reservation is refunded on request", 40, -40, 100},
				{"a refund never makes the key fuller than fresh", 40, -1000, 100},
				{"an exact estimate changes nothing", 40, 0, 60},
				{"an over-run within the quota is charged", 40, 20, 40},
			}
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					assert.Equal(t, tt.remaining, remainingAfterSettle(t, l, tt.reserve, tt.delta))
				})
			}
		})
	}
}

func TestAnOverRunPutsTheKeyInDebtAndItsNextRequestWaits(t *testing.T) {
	t0 := int64(1_700_000_000_000_000_000)
	l := Limit{Kind: TokenBucket, Quota: 100, Window: 100 * time.Second} // one unit per second
	state, _, err := l.Decide(nil, t0, 100, nil)
	require.NoError(t, err)
	state, err = l.Adjust(state, t0, t0, 50, nil) // used 150 of a bucket of 100
	require.NoError(t, err)
	_, d, err := l.Decide(state, t0+int64(49*time.Second), 1, nil)
	require.NoError(t, err)
	assert.False(t, d.Allowed, "the debt of 50 takes 50 s to repay before one unit refills")
	_, d, err = l.Decide(state, t0+int64(51*time.Second), 1, nil)
	require.NoError(t, err)
	assert.True(t, d.Allowed)
}

func TestAnOverRunIsCappedAtOneCapacityOfDebt(t *testing.T) {
	t0 := int64(1_700_000_000_000_000_000)
	l := Limit{Kind: TokenBucket, Quota: 10, Window: 10 * time.Second}
	state, _, err := l.Decide(nil, t0, 10, nil)
	require.NoError(t, err)
	state, err = l.Adjust(state, t0, t0, 1_000_000, nil)
	require.NoError(t, err)
	assert.False(t, l.IdleAt(state, t0+int64(19*time.Second)))
	assert.True(t, l.IdleAt(state, t0+int64(20*time.Second)), "two refill times at most")

	f := Limit{Kind: FixedWindow, Quota: 10, Window: time.Minute}
	w0 := int64(1_700_000_040_000_000_000) // a window start
	fs, _, err := f.Decide(nil, w0, 10, nil)
	require.NoError(t, err)
	fs, err = f.Adjust(fs, w0, w0, 1_000_000, nil)
	require.NoError(t, err)
	_, count, err := decodeFixed(fs)
	require.NoError(t, err)
	assert.Equal(t, int64(20), count)
}

func TestAFixedWindowRefundsNothingIntoTheWindowAfterTheReservation(t *testing.T) {
	l := Limit{Kind: FixedWindow, Quota: 10, Window: time.Minute}
	w0 := int64(1_700_000_040_000_000_000)
	state, _, err := l.Decide(nil, w0, 10, nil)
	require.NoError(t, err)
	later := w0 + int64(time.Minute) // the next window
	state, _, err = l.Decide(state, later, 10, nil)
	require.NoError(t, err)
	state, err = l.Adjust(state, later, w0, -10, nil)
	require.NoError(t, err)
	p, err := l.Peek(state, later)
	require.NoError(t, err)
	assert.Equal(t, int64(0), p.Remaining, "the refund of the old window's reservation is dropped")
}

func TestAdjustRefusesKindsThatDoNotSettle(t *testing.T) {
	for _, l := range []Limit{
		{Kind: SlidingLog, Quota: 10, Window: time.Minute},
		{Kind: SlidingWindow, Quota: 10, Window: time.Minute},
	} {
		assert.False(t, l.Kind.Settles())
		_, err := l.Adjust(nil, 1, 1, -1, nil)
		assert.ErrorContains(t, err, "does not support settling")
	}
}

func TestAdjustRejectsMalformedState(t *testing.T) {
	l := Limit{Kind: TokenBucket, Quota: 10, Window: time.Minute}
	_, err := l.Adjust([]byte{0x11, 1, 2}, 1, 1, -1, nil)
	assert.ErrorIs(t, err, ErrMalformedState)
}

// Near 2^52 µs a debt of one capacity would put the TAT past what a state holds: the over-run
// stops there, and the state stays readable (an unreadable one would forgive the debt).
func TestAnOverRunAtTheEndOfTimeLeavesAReadableState(t *testing.T) {
	l := Limit{Kind: LeakyBucket, Quota: 1, Window: MaxWindow}
	end := int64(maxTimeUs) * nsPerUs
	state, d, err := l.Decide(nil, end, 1, nil)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	state, err = l.Adjust(state, end, end, 1, nil)
	require.NoError(t, err)
	_, d, err = l.Decide(state, end, 1, nil)
	require.NoError(t, err, "the state Adjust wrote is readable")
	assert.False(t, d.Allowed, "the debt is kept")
}

// TestAnOverRunPastTheReservationPutsTheKeyInDebtByWhatItUsedUpToOneCapacity: issue 20, finding 3's
// last case. A 100/m bucket reserves 10; the answer says usage u. The key then owes u−100 units
// (at most one capacity): its next request waits (u−100+1)×0.6 s, until a unit more than the debt
// has refilled.
func TestAnOverRunPastTheReservationPutsTheKeyInDebtByWhatItUsedUpToOneCapacity(t *testing.T) {
	t0 := int64(1_700_000_000_000_000_000)
	l := Limit{Kind: TokenBucket, Quota: 100, Window: time.Minute}
	for _, tt := range []struct {
		used int64
		wait time.Duration
	}{
		{110, 6600 * time.Millisecond},
		{150, 30600 * time.Millisecond},
		{200, 60600 * time.Millisecond},
		{1000, 60600 * time.Millisecond}, // a debt of one capacity at most
	} {
		state, _, err := l.Decide(nil, t0, 10, nil)
		require.NoError(t, err)
		state, err = l.Adjust(state, t0, t0, tt.used-10, nil)
		require.NoError(t, err)
		_, d, err := l.Decide(state, t0, 1, nil)
		require.NoError(t, err)
		assert.Equal(t, tt.wait, d.RetryAfter, "used %d", tt.used)
	}
}

// TestAClientThatUnderReservesEveryRequestSustainsAtMostTheStatedBound: the over-run of each
// request is charged up to one capacity of debt below empty. Retrying every second for an hour
// against 100/m (6,000 units an hour), reserving r and using u each time:
//   - a bucket carries the whole debt while u−r <= capacity: at most the limit plus two capacities
//     (the first burst and the last debt); past that it sustains u×quota/(r+capacity) a window;
//   - a fixed window forgets its count at the window's end: at most twice the quota a window.
func TestAClientThatUnderReservesEveryRequestSustainsAtMostTheStatedBound(t *testing.T) {
	t0 := int64(1_700_000_000_000_000_000)
	bucket := Limit{Kind: TokenBucket, Quota: 100, Window: time.Minute}
	fixed := Limit{Kind: FixedWindow, Quota: 100, Window: time.Minute}
	for _, tt := range []struct {
		name          string
		l             Limit
		reserve, used int64
		bound         int64
	}{
		{"a bucket whose over-runs fit one capacity carries them all", bucket, 10, 110, 6000 + 2*100},
		{"a bucket whose over-runs pass one capacity", bucket, 10, 150, 150*6000/110 + 2*100},
		{"a fixed window", fixed, 10, 150, 60 * 2 * 100},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var state []byte
			used := int64(0)
			for s := range 3600 {
				now := t0 + int64(s)*int64(time.Second)
				next, d, err := tt.l.Decide(state, now, tt.reserve, nil)
				require.NoError(t, err)
				state = next
				if !d.Allowed {
					continue
				}
				state, err = tt.l.Adjust(state, now, now, tt.used-tt.reserve, nil)
				require.NoError(t, err)
				used += tt.used
			}
			assert.LessOrEqual(t, used, tt.bound)
			t.Logf("%s: %d units used in an hour of 6000 (bound %d)", tt.name, used, tt.bound)
		})
	}
}
