package algorithms

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// effectiveWindowError checks the contract of d.EffectiveWindow, for d decided (or peeked) at now
// with next the state after it: it is positive and whole microseconds, a denial waits at least as
// long, spending Remaining at now is admitted, and then a unit more is admitted at now +
// EffectiveWindow and not a microsecond earlier.
func effectiveWindowError(l Limit, next []byte, now int64, d Decision) error {
	now -= now % 1000 // decisions count from the microsecond
	e := d.EffectiveWindow
	switch {
	case e <= 0 || e%us != 0:
		return fmt.Errorf("effective window %v: want whole microseconds > 0", e)
	case !d.Allowed && d.RetryAfter != RetryNever && e > d.RetryAfter:
		return fmt.Errorf("effective window %v after RetryAfter %v", e, d.RetryAfter)
	}
	spent := next
	if d.Remaining > 0 {
		var s Decision
		var err error
		if spent, s, err = l.Decide(next, now, d.Remaining, nil); err != nil || !s.Allowed {
			return fmt.Errorf("spending Remaining %d at once: %+v, %v", d.Remaining, s, err)
		}
	}
	if _, early, _ := l.Decide(spent, now+int64(e-us), 1, nil); early.Allowed {
		return fmt.Errorf("one unit more admitted 1µs before the effective window %v ends", e)
	}
	if _, due, _ := l.Decide(spent, now+int64(e), 1, nil); !due.Allowed {
		return fmt.Errorf("one unit more denied when the effective window %v ends: %+v", e, due)
	}
	return nil
}

// checkEffectiveWindow checks effectiveWindowError's contract, and that a client that sends units
// one by one at random instants within the window gets no more than Remaining.
func checkEffectiveWindow(t *testing.T, r *rand.Rand, l Limit, next []byte, now int64, d Decision) {
	t.Helper()
	require.NoError(t, effectiveWindowError(l, next, now, d), "%+v", d)
	now -= now % 1000
	e := d.EffectiveWindow
	at := make([]int64, 12)
	for i := range at {
		at[i] = now + r.Int64N(int64(e))
	}
	at = append(at, now, now)
	slices.Sort(at)
	state, got := next, int64(0)
	for _, t0 := range at {
		for range 1 + r.IntN(int(min(d.Remaining, 3))+1) {
			s, dec, err := l.Decide(state, t0, 1, nil)
			require.NoError(t, err)
			state = s
			if dec.Allowed {
				got++
			}
		}
	}
	assert.LessOrEqual(t, got, d.Remaining, "admitted within the effective window %v", e)
}

// TestTheEffectiveWindowEndsWhenOneUnitMoreThanRemainingCanFirstBeAdmitted checks
// Decision.EffectiveWindow after every decision and every Peek of random traces of every conformance
// limit.
func TestTheEffectiveWindowEndsWhenOneUnitMoreThanRemainingCanFirstBeAdmitted(t *testing.T) {
	r := rand.New(rand.NewPCG(23, 11))
	for _, l := range conformanceLimits {
		t.Run(limitName(l), func(t *testing.T) {
			var state []byte
			now := int64(1_700_000_000_000_000_000)
			for i, rq := range genTrace(r, l, 300) {
				now = max(now+int64(rq.dt), 0)
				peek, err := l.Peek(state, now)
				require.NoError(t, err)
				t.Run(fmt.Sprintf("peek %d", i), func(t *testing.T) { checkEffectiveWindow(t, r, l, state, now, peek) })
				next, d, err := l.Decide(state, now, rq.cost, nil)
				require.NoError(t, err)
				t.Run(fmt.Sprintf("decision %d", i), func(t *testing.T) { checkEffectiveWindow(t, r, l, next, now, d) })
				state = next
			}
		})
	}
}

// TestTheEffectiveWindowOfEachAlgorithm names the effective window at chosen instants: the time
// within which no more than Remaining can be used, which for the sliding algorithms is when their
// oldest use stops counting, not when the quota is full again (Reset).
func TestTheEffectiveWindowOfEachAlgorithm(t *testing.T) {
	minute := func(k Kind, q int64) Limit { return Limit{Kind: k, Quota: q, Window: time.Minute} }
	start := int64(1_800_000_000 * time.Second) // a multiple of a minute and of an hour
	for _, tc := range []struct {
		name      string
		limit     Limit
		steps     [][2]time.Duration // at (after start), cost
		peekAt    time.Duration      // > 0: Peek at this instant after the steps
		remaining int64
		want      time.Duration
		reset     time.Duration
	}{
		{"an unused token bucket of 100/min gets a unit back 0.6 s after spending everything",
			minute(TokenBucket, 100), nil, time.Second, 100, 600 * time.Millisecond, 0},
		{"a token bucket of 100/h two units down gets its next unit in 36 s, and is full in 72 s",
			Limit{Kind: TokenBucket, Quota: 100, Window: time.Hour}, [][2]time.Duration{{0, 1}, {0, 1}}, 0, 98, 36 * time.Second, 72 * time.Second},
		{"a leaky bucket of 10/s one unit down drains it in 100 ms",
			Limit{Kind: LeakyBucket, Quota: 10, Window: time.Second}, [][2]time.Duration{{0, 1}}, 0, 9, 100 * time.Millisecond, 100 * time.Millisecond},
		{"a fixed window of 10/min 20 s in ends in 40 s",
			minute(FixedWindow, 10), [][2]time.Duration{{20 * time.Second, 3}}, 0, 7, 40 * time.Second, 40 * time.Second},
		{"an unused fixed window ends at its end too",
			minute(FixedWindow, 10), nil, 15 * time.Second, 10, 45 * time.Second, 0},
		{"a sliding log with 3 used at 0 s and 2 at 25 s gets more when the first 3 expire: 35 s, not 60 s",
			minute(SlidingLog, 10), [][2]time.Duration{{0, 3}, {25 * time.Second, 2}}, 0, 5, 35 * time.Second, 60 * time.Second},
		{"an unused sliding log gets a unit back one window after spending everything",
			minute(SlidingLog, 10), nil, time.Second, 10, time.Minute, 0},
		{"a sliding window counter with 5 of 10 used 25 s into its window frees a unit 6 s into the next: 41 s, not 95 s",
			minute(SlidingWindow, 10), [][2]time.Duration{{0, 3}, {25 * time.Second, 2}}, 0, 5, 41 * time.Second, 95 * time.Second},
		{"a sliding window counter whose previous window had 10 frees a unit every 6 s",
			minute(SlidingWindow, 10), [][2]time.Duration{{0, 10}}, 66 * time.Second, 1, 6 * time.Second, 54 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var state []byte
			var d Decision
			var err error
			for _, s := range tc.steps {
				state, d, err = tc.limit.Decide(state, start+int64(s[0]), int64(s[1]), nil)
				require.NoError(t, err)
				require.True(t, d.Allowed)
			}
			if tc.peekAt > 0 {
				d, err = tc.limit.Peek(state, start+int64(tc.peekAt))
				require.NoError(t, err)
			}
			assert.Equal(t, tc.remaining, d.Remaining, "remaining")
			assert.Equal(t, tc.want, d.EffectiveWindow, "effective window")
			assert.Equal(t, tc.reset, d.Reset, "reset")
		})
	}
}

// TestEffectiveWindowOfTellsWhatADecisionWithoutOneAllows checks the derivation for decisions that
// crossed a wire: exact for the buckets, the wait of a denial, Reset otherwise.
func TestEffectiveWindowOfTellsWhatADecisionWithoutOneAllows(t *testing.T) {
	bucket := Limit{Kind: TokenBucket, Quota: 10, Window: 10 * time.Second}
	log := Limit{Kind: SlidingLog, Quota: 10, Window: time.Minute}
	for _, tc := range []struct {
		name  string
		limit Limit
		d     Decision
		want  time.Duration
	}{
		{"a decision that has one keeps it", log, Decision{Allowed: true, Remaining: 5, Reset: time.Minute, EffectiveWindow: 35 * time.Second}, 35 * time.Second},
		{"a full bucket gets one unit's refill", bucket, Decision{Allowed: true, Remaining: 10}, time.Second},
		{"a bucket one unit down gets it back when full", bucket, Decision{Allowed: true, Remaining: 9, Reset: 300 * time.Millisecond}, 300 * time.Millisecond},
		{"a bucket five units down gets the first back four units before it is full", bucket, Decision{Allowed: true, Remaining: 5, Reset: 5500 * time.Millisecond}, 1500 * time.Millisecond},
		{"a unit whose refill the rounding of Reset passed is due at once", bucket, Decision{Allowed: true, Remaining: 5, Reset: 4 * time.Second}, time.Nanosecond},
		{"a denial waits its RetryAfter", log, Decision{RetryAfter: 7 * time.Second, Reset: time.Minute}, 7 * time.Second},
		{"a denial no wait ends falls back to what the limit tells", bucket, Decision{RetryAfter: RetryNever, Remaining: 9, Reset: time.Second}, time.Second},
		{"a sliding log without one says when it is full, an upper bound", log, Decision{Allowed: true, Remaining: 5, Reset: time.Minute}, time.Minute},
		{"an unused window without one does not tell", log, Decision{Allowed: true, Remaining: 10}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, tc.limit.EffectiveWindowOf(tc.d))
		})
	}
}

// TestEffectiveWindowOfAgreesWithDecideForTheBuckets derives the buckets' effective window from
// Remaining and Reset alone and finds Decide's, within the microsecond that each rounds up to.
func TestEffectiveWindowOfAgreesWithDecideForTheBuckets(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 8))
	for _, l := range conformanceLimits {
		if !l.Kind.bucket() {
			continue
		}
		var state []byte
		now := int64(1_700_000_000_000_000_000)
		for i, rq := range genTrace(r, l, 300) {
			now = max(now+int64(rq.dt), 0)
			next, d, err := l.Decide(state, now, rq.cost, nil)
			require.NoError(t, err)
			if d.Allowed || d.RetryAfter == RetryNever {
				bare := d
				bare.EffectiveWindow = 0
				got := l.EffectiveWindowOf(bare)
				assert.Less(t, (got - d.EffectiveWindow).Abs(), us, "%s step %d: %v, Decide %v", limitName(l), i, got, d.EffectiveWindow)
			}
			state = next
		}
	}
}
