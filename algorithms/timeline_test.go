package algorithms

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Named instants, multiples of d after base (a unix time that is a multiple of every window
// used below, so fixed windows start at t0, t10, t20, …).
const (
	d    = 100 * time.Millisecond
	base = int64(1_700_000_000 * time.Second)
)

const (
	t0 time.Duration = d * iota
	t1
	t2
	t3
	t4
	t5
	t6
	t7
	t8
	t9
	t10
	t11
	t12
	t13
	t14
	t15
	t16
	t17
	t18
	t19
	t20
)

const us = time.Microsecond

// step is one request in a timeline: at (after base) with cost, and what Decide must answer.
// wantWait is the Delay when allowed and the RetryAfter when denied.
type step struct {
	at            time.Duration
	cost          int64
	wantAllowed   bool
	wantRemaining int64
	wantWait      time.Duration
}

// run feeds steps to l in order, threading the state, and reports every mismatch.
func run(t *testing.T, l Limit, steps []step) {
	t.Helper()
	var state []byte
	for i, s := range steps {
		next, dec, err := l.Decide(state, base+int64(s.at), s.cost, nil)
		require.NoError(t, err, "step %d", i)
		wait := dec.Delay
		if !dec.Allowed {
			wait = dec.RetryAfter
		}
		if dec.Allowed != s.wantAllowed || dec.Remaining != s.wantRemaining || wait != s.wantWait {
			t.Errorf("step %d: Decide(%v, cost %d) = allowed %v, remaining %d, wait %v; want %v, %d, %v",
				i, s.at, s.cost, dec.Allowed, dec.Remaining, wait, s.wantAllowed, s.wantRemaining, s.wantWait)
		}
		state = next
	}
}

func TestTimelines(t *testing.T) {
	perSecond := func(k Kind, q, burst int64) Limit {
		return Limit{Kind: k, Quota: q, Window: time.Second, Burst: burst}
	}
	tests := []struct {
		name  string
		limit Limit
		steps []step
	}{
		{"token bucket admits a burst of 3 and refuses the 4th", perSecond(TokenBucket, 3, 0), []step{
			{t0, 1, true, 2, 0},
			{t0, 1, true, 1, 0},
			{t0, 1, true, 0, 0},
			{t0, 1, false, 0, 333334 * us}, // one token takes 1s/3 = 333333.3µs, rounded up
		}},
		{"token bucket refills one token every third of a second", perSecond(TokenBucket, 3, 0), []step{
			{t0, 3, true, 0, 0},
			{t3, 1, false, 0, 33334 * us}, // 0.9 tokens
			{t4, 1, true, 0, 0},           // 1.2 tokens
			{t10, 1, true, 1, 0},          // 0.2 + 3×0.6 = 2 tokens before this request
		}},
		{"token bucket with burst 5 admits 5 at once, then 3 per second", perSecond(TokenBucket, 3, 5), []step{
			{t0, 5, true, 0, 0},
			{t0, 1, false, 0, 333334 * us},
			{t10, 3, true, 0, 0},
			{t10, 1, false, 0, 333334 * us},
		}},
		{"token bucket makes a cost of 2 wait for two tokens", perSecond(TokenBucket, 3, 0), []step{
			{t0, 3, true, 0, 0},
			{t4, 2, false, 1, 266667 * us}, // 1.2 tokens; 2 at 666666.7µs
			{t7, 2, true, 0, 0},
		}},
		{"token bucket never admits a cost above its burst", perSecond(TokenBucket, 3, 0), []step{
			{t0, 4, false, 3, RetryNever},
			{t0, 3, true, 0, 0},
		}},
		{"leaky bucket queues a burst of 3 a third of a second apart", perSecond(LeakyBucket, 3, 0), []step{
			{t0, 1, true, 2, 0},
			{t0, 1, true, 1, 333334 * us},
			{t0, 1, true, 0, 666667 * us},
			{t0, 1, false, 0, 333334 * us}, // the queue is full
			{t4, 1, true, 0, 600000 * us},  // one slot drained; its turn is at 1s
		}},
		{"leaky bucket with burst 1 is a strict pacer", perSecond(LeakyBucket, 10, 1), []step{
			{t0, 1, true, 0, 0},
			{t0 + 50*time.Millisecond, 1, false, 0, 50 * time.Millisecond},
			{t1, 1, true, 0, 0},
			{t2, 1, true, 0, 0},
		}},
		{"fixed window admits 3 per window and resets at the edge", perSecond(FixedWindow, 3, 0), []step{
			{t0, 1, true, 2, 0},
			{t1, 1, true, 1, 0},
			{t2, 1, true, 0, 0},
			{t5, 1, false, 0, 500 * time.Millisecond},
			{t10, 1, true, 2, 0},
		}},
		{"fixed window admits twice its quota across an edge", perSecond(FixedWindow, 3, 0), []step{
			{t9, 3, true, 0, 0},
			{t10, 3, true, 0, 0}, // 6 within 100ms: the fixed window's worst case
			{t11, 1, false, 0, 900 * time.Millisecond},
		}},
		{"sliding log admits 3 in any second", perSecond(SlidingLog, 3, 0), []step{
			{t0, 1, true, 2, 0},
			{t3, 1, true, 1, 0},
			{t6, 1, true, 0, 0},
			{t9, 1, false, 0, 100 * time.Millisecond}, // t0 expires at t10
			{t10, 1, true, 0, 0},
			{t12, 1, false, 0, 100 * time.Millisecond}, // t3 expires at t13
		}},
		{"sliding log refuses the burst at the edge that a fixed window lets through", perSecond(SlidingLog, 3, 0), []step{
			{t9, 3, true, 0, 0},
			{t10, 1, false, 0, 900 * time.Millisecond},
			{t19, 2, true, 1, 0},
		}},
		{"sliding window counter weighs the previous window by the share still in view", perSecond(SlidingWindow, 4, 0), []step{
			{t5, 4, true, 0, 0},
			{t15, 1, true, 1, 0},                       // ceil(4×0.5) + 0 = 2 used
			{t15, 1, true, 0, 0},                       //
			{t15, 1, false, 0, 250 * time.Millisecond}, // 4×(1−e)/1 <= 1 once e >= 0.75
			{t18, 1, true, 0, 0},                       // ceil(4×0.2) + 2 = 3 used
		}},
		{"sliding window counter keeps most of the fixed window's edge burst out", perSecond(SlidingWindow, 3, 0), []step{
			{t9, 3, true, 0, 0},
			{t10, 1, false, 0, 333334 * us}, // ceil(3×(1−e)) <= 2 once e >= 1/3
			{t14, 1, true, 0, 0},            // ceil(3×0.6) + 0 = 2 used
		}},
		{"sliding window counter forgets a window two windows back", perSecond(SlidingWindow, 3, 0), []step{
			{t0, 3, true, 0, 0},
			{t20, 3, true, 0, 0},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.NoError(t, tc.limit.Validate())
			run(t, tc.limit, tc.steps)
		})
	}
}
