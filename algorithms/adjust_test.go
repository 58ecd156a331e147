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

func TestAnOverRunIsCappedAtMaxDebtCapacitiesOfDebt(t *testing.T) {
	t0 := int64(1_700_000_000_000_000_000)
	l := Limit{Kind: TokenBucket, Quota: 10, Window: 10 * time.Second}
	state, _, err := l.Decide(nil, t0, 10, nil)
	require.NoError(t, err)
	state, err = l.Adjust(state, t0, t0, 1_000_000, nil)
	require.NoError(t, err)
	assert.False(t, l.IdleAt(state, t0+int64((MaxDebt+1)*10*time.Second-time.Second)))
	assert.True(t, l.IdleAt(state, t0+int64((MaxDebt+1)*10*time.Second)), "MaxDebt+1 refill times at most")

	f := Limit{Kind: FixedWindow, Quota: 10, Window: time.Minute}
	w0 := int64(1_700_000_040_000_000_000) // a window start
	fs, _, err := f.Decide(nil, w0, 10, nil)
	require.NoError(t, err)
	fs, err = f.Adjust(fs, w0, w0, 1_000_000, nil)
	require.NoError(t, err)
	_, count, err := decodeFixed(fs)
	require.NoError(t, err)
	assert.Equal(t, int64((MaxDebt+1)*10), count, "a full window and MaxDebt quotas of debt")
	assert.False(t, f.IdleAt(fs, w0+int64((MaxDebt+1)*time.Minute-time.Second)))
	assert.True(t, f.IdleAt(fs, w0+int64((MaxDebt+1)*time.Minute)), "MaxDebt+1 windows at most")
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

// TestAnOverRunPastTheReservationIsCarriedWholeAsDebtUpToMaxDebtCapacities: issue 20, finding 3's
// last case. A 100/m bucket reserves 10; the answer says usage u. The key then owes u−100 units
// (up to MaxDebt capacities): its next request waits (u−100+1)×0.6 s, until a unit more than the
// debt has refilled. Before, a debt stopped at one capacity (60.6 s for 200 and 1000 alike).
func TestAnOverRunPastTheReservationIsCarriedWholeAsDebtUpToMaxDebtCapacities(t *testing.T) {
	t0 := int64(1_700_000_000_000_000_000)
	l := Limit{Kind: TokenBucket, Quota: 100, Window: time.Minute}
	for _, tt := range []struct {
		used int64
		wait time.Duration
	}{
		{110, 6600 * time.Millisecond},
		{150, 30600 * time.Millisecond},
		{200, 60600 * time.Millisecond},
		{1000, 540600 * time.Millisecond},            // 900 owed: 9 minutes
		{6500, 3840600 * time.Millisecond},           // 6400 owed: MaxDebt capacities, 64 minutes
		{1_000_000, 3840600 * time.Millisecond},      // a debt of MaxDebt capacities at most
		{MaxQuota * 100, 3840600 * time.Millisecond}, // an over-run past any product is capped too
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

// TestRequestsInFlightTogetherThatOverRunSustainAtMostTheLimit: issue 20, finding 3. Each second for
// an hour against 100/m (6,000 units an hour), a client sends n requests together, each reserving r,
// and they settle to u after all were decided. A bucket carries every over-run whole (up to MaxDebt
// capacities of debt), so the client uses at most the limit plus the first burst and what its last
// requests used: quota×T/W + C + n×u, whatever n, r and u (as long as no n×u passes
// (MaxDebt+1)×C). Before, debt stopped at one capacity and the rest was forgiven (10 requests
// together reserving 10 and using 640 used 40,960 an hour). A fixed window carries what it counted
// past its quota into the next windows, so the same bound holds with C the quota (before, it
// forgot its count at the window's end: n requests together used up to n×u a window, 91,500 an
// hour for 10 × 150).
func TestRequestsInFlightTogetherThatOverRunSustainAtMostTheLimit(t *testing.T) {
	t0 := int64(1_700_000_000_000_000_000)
	bucket := Limit{Kind: TokenBucket, Quota: 100, Window: time.Minute}
	fixed := Limit{Kind: FixedWindow, Quota: 100, Window: time.Minute}
	for _, tt := range []struct {
		name             string
		l                Limit
		n, reserve, used int64
		bound            int64
	}{
		{"one request at a time that over-runs within a capacity", bucket, 1, 10, 110, 6000 + 100 + 110},
		{"one request at a time that over-runs past a capacity", bucket, 1, 10, 150, 6000 + 100 + 150},
		{"ten requests together that each over-run past a capacity", bucket, 10, 10, 150, 6000 + 100 + 10*150},
		{"ten requests together whose over-runs add up to 63 capacities", bucket, 10, 10, 640, 6000 + 100 + 10*640},
		{"a fixed window carries what ten requests together over-ran past a quota", fixed, 10, 10, 150, 6000 + 100 + 10*150},
		{"a fixed window carries over-runs of ten requests together adding up to 63 quotas", fixed, 10, 10, 640, 6000 + 100 + 10*640},
	} {
		t.Run(tt.name, func(t *testing.T) {
			used := sustained(t, tt.l, t0, tt.n, tt.reserve, tt.used)
			assert.LessOrEqual(t, used, tt.bound)
			t.Logf("%s: %d units used in an hour of 6000 (bound %d)", tt.name, used, tt.bound)
		})
	}
}

// sustained returns what a client uses in an hour against l that sends, each second, n requests
// together (all decided before any settles), each reserving reserve and settling to used.
func sustained(t *testing.T, l Limit, t0, n, reserve, used int64) int64 {
	t.Helper()
	var state []byte
	total := int64(0)
	for s := range 3600 {
		now := t0 + int64(s)*int64(time.Second)
		admitted := int64(0)
		for range n {
			next, d, err := l.Decide(state, now, reserve, nil)
			require.NoError(t, err)
			state = next
			if d.Allowed {
				admitted++
			}
		}
		for range admitted {
			next, err := l.Adjust(state, now, now, used-reserve, nil)
			require.NoError(t, err)
			state = next
			total += used
		}
	}
	return total
}

// Settle reports the units a settle applied, never the units it asked for: a refund into a bucket
// takes back what it lacked of full, rounded up (its Remaining grows by exactly that), into a fixed
// window what its count holds of the reservation's window; an over-run charges up to the debt's
// ceiling.
func TestSettleReportsTheUnitsASettleApplied(t *testing.T) {
	const t0 = int64(1_800_000_000_000_000_000) // ns; a 10 s fixed window begins here
	bucket := Limit{Kind: TokenBucket, Quota: 10, Window: 10 * time.Second}
	window := Limit{Kind: FixedWindow, Quota: 10, Window: 10 * time.Second}
	tests := []struct {
		name  string
		l     Limit
		cost  int64 // decided at t0 first, or 0
		at    int64 // the refund's now
		delta int64
		want  int64
	}{
		{"a refund into a fresh bucket gives nothing back", bucket, 0, t0, -7, 0},
		{"a refund of 7 into a bucket with 2 units used gives back 2", bucket, 2, t0, -7, 2},
		{"a refund of 1 into a bucket with 2 units used gives back 1", bucket, 2, t0, -1, 1},
		{"a refund into a bucket that lacks 1.5 units gives back 2", bucket, 2, t0 + int64(500*time.Millisecond), -7, 2},
		{"a refund into a bucket that lacks a microsecond's refill gives back 1", bucket, 1, t0 + int64(time.Second-time.Microsecond), -7, 1},
		{"a refund into a full bucket gives nothing back", bucket, 2, t0 + int64(2*time.Second), -7, 0},
		{"a refund of 10^12 into an empty bucket gives back its capacity", bucket, 10, t0, -1_000_000_000_000, 10},
		{"an over-run charges its units", bucket, 2, t0, 5, 5},
		{"an over-run of 10^12 into a fresh bucket charges the 65 capacities of its ceiling", bucket, 0, t0, 1_000_000_000_000, 650},
		{"an over-run past the ceiling charges what was left below it, rounded up", bucket, 2, t0 + int64(500*time.Millisecond), 1_000_000_000_000, 649}, // 650 - 1.5
		{"an over-run of 10^12 into a fixed window charges up to 65 quotas", window, 3, t0, 1_000_000_000_000, 647},
		{"a refund into an empty fixed window gives nothing back", window, 0, t0, -9, 0},
		{"a refund of 9 into a fixed window that counts 3 gives back 3", window, 3, t0, -9, 3},
		{"a refund into the window after the reservation's gives nothing back", window, 3, t0 + int64(10*time.Second), -9, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var state []byte
			if tt.cost > 0 {
				var err error
				state, _, err = tt.l.Decide(nil, t0, tt.cost, nil)
				require.NoError(t, err)
			}
			next, given, err := tt.l.Settle(state, tt.at, t0, tt.delta, nil)
			require.NoError(t, err)
			assert.Equal(t, tt.want, given)
			if tt.delta < 0 && tt.l.Kind == TokenBucket {
				before, err := tt.l.Peek(state, tt.at)
				require.NoError(t, err)
				after, err := tt.l.Peek(next, tt.at)
				require.NoError(t, err)
				assert.Equal(t, given, after.Remaining-before.Remaining, "the bucket's Remaining grows by the units given back")
			}
		})
	}
}
