package algorithms

import (
	"math/bits"
	"time"
)

// The effective window of a decision (Decision.EffectiveWindow): the time within which no more than
// Remaining can be admitted, which is when a request of cost 1 would be admitted after Remaining
// were spent at now. Spending it all at once is the most a client can get out of every algorithm:
// the buckets and the fixed window do not care when units are spent, the sliding log forgets the
// oldest entries first, and the sliding window counter weighs a unit spent in the current window
// less and less after it, one spent in the next window fully. The formulas are in doc.go.

// The bucket's (stepBucket): with tat the state after the decision and r Remaining, spending r
// moves tat to tat + r×T, and one more unit conforms once tat + (r+1)×T <= now + τ. It is > 0
// because r = floor((now + τ − tat)/T).

// effectiveWindow is the sliding log's. The live entries are s's from first on, then those of the
// request just admitted, at eff: count in all. Spending Remaining adds as many at eff, which makes
// Quota; one more unit is admitted once the oldest of them expires (with count above Quota, written
// under a larger Quota, once count − Quota + 1 have expired).
func (s logState) effectiveWindow(first int, count, q, w, eff, n int64) time.Duration {
	t := eff
	if j := max(count-q, 0); j < int64(s.len()-first) {
		t = s.at(first + int(j))
	}
	return time.Duration(usToDuration(t + w - n))
}

// slidingEffective is the sliding window counter's, for the state (s, p, k) after the decision and
// r Remaining: when a request of cost 1 is admitted once r more are counted in this window.
func slidingEffective(s, p, k, r, q, w, n int64) time.Duration {
	return time.Duration(usToDuration(slidingRetry(s, p, k+r, q, w, 1) - n))
}

// EffectiveWindowOf returns the effective window of d, a decision of l: d.EffectiveWindow when d
// has one (Decide and Peek always set it). A decision rebuilt from Remaining, Reset and RetryAfter
// alone (a cached denial, or the answer of a service older than effective_ms) gives:
//   - on a denial that waiting can end, RetryAfter: the wait of the request denied, which is the
//     effective window for a request of cost 1 with nothing left, and longer otherwise;
//   - for the buckets, the window derived from Remaining and Reset, exactly (up to the rounding of
//     Reset): with m units missing the bucket is full after Reset and each unit takes
//     T = Window/Quota, so the next unit is back after Reset − (m−1)×T, and after T when none is
//     missing;
//   - for the fixed window, Reset: the window's end when anything is used, else 0 (unknown);
//   - for the sliding log and the sliding window counter, Reset: the time until the quota is full
//     again, an upper bound (0 when nothing is used: unknown).
//
// So it is never shorter than the effective window, and 0 only when d does not tell.
func (l Limit) EffectiveWindowOf(d Decision) time.Duration {
	switch {
	case d.EffectiveWindow > 0:
		return d.EffectiveWindow
	case !d.Allowed && d.RetryAfter > 0 && d.RetryAfter != RetryNever:
		return d.RetryAfter
	case l.Kind.bucket() && l.Quota > 0 && l.Window > 0:
		return l.bucketWindowOf(d)
	}
	return max(d.Reset, 0)
}

// bucketWindowOf derives a bucket's effective window from d's Remaining and Reset (see
// EffectiveWindowOf).
func (l Limit) bucketWindowOf(d Decision) time.Duration {
	q, w := uint64(l.Quota), uint64(l.Window)
	m := max(l.Capacity()-max(d.Remaining, 0), 0)
	if m == 0 || d.Reset <= 0 {
		return time.Duration((w + q - 1) / q) // full: one unit's refill, T, rounded up
	}
	hi, lo := bits.Mul64(uint64(m-1), w)
	if hi >= q {
		return d.Reset // cannot happen for a valid limit: (m−1)×Window/Quota < Capacity×Window/Quota
	}
	refill, _ := bits.Div64(hi, lo, q)
	if refill >= uint64(d.Reset) {
		return time.Nanosecond // Reset was rounded up: the unit is due at once
	}
	return d.Reset - time.Duration(refill)
}
