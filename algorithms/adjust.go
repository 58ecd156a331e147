package algorithms

import "fmt"

// Settles: a request reserves an estimate of its cost through Decide, and once its real cost is
// known the difference is applied with Adjust, without a decision. A refund (delta < 0) gives back
// what the reservation took and was not used; an over-run (delta > 0) is charged even when it does
// not fit, so the key may end in debt and its next requests wait until the debt is repaid.

// MaxDebt is the most debt a settled over-run leaves a key in, in capacities below empty: the
// whole over-run is carried until it is repaid, up to MaxDebt refill times for a bucket (τ each, a
// Window when the capacity is the quota) and MaxDebt windows (calendar periods) for a fixed window,
// which carries what was counted past its quota into the windows after it. A debt past it is the
// only part of an over-run that is forgiven, which only over-runs adding up to more than MaxDebt
// capacities at once can reach.
const MaxDebt = 64

// Settles reports whether Adjust supports limits of kind k: the two buckets and the fixed window.
// The sliding log and the sliding window counter keep no state a refund could be applied to
// exactly, so a configuration that settles costs must not use them.
func (k Kind) Settles() bool { return k.bucket() || k == FixedWindow }

// Adjust applies delta cost units to the encoded state at now (unix nanoseconds), for a reservation
// that Decide admitted at reservedAt, and appends the next state to dst[:0] (as Decide does; dst may
// be state itself).
//
// A negative delta refunds -delta units, never beyond a fresh state (a bucket cannot be fuller than
// full, a window count not below 0). A fixed window refunds only when reservedAt lies in the current
// window (for a calendar window, the current period): the window that held the reservation is gone,
// and refunding into its successor would admit more than the limit. A positive delta is charged
// unconditionally: a bucket carries it whole, up to a debt of MaxDebt capacities (its TAT may reach
// now + (MaxDebt+1)×τ: the key waits up to MaxDebt extra refill times; a TAT never passes 2^52 µs +
// MaxWindow, the latest a state holds, which matters only at the end of representable time); a
// fixed window's count may reach (MaxDebt+1)×Quota, and what passes the quota is carried into the
// following windows, each paying a quota (positionFixed): the key waits up to MaxDebt windows more
// than the current one. A delta of 0, or any delta on an empty state that would only refund, leaves the state as it is.
//
// err is non-nil for an invalid Limit, a kind that does not settle (see Kind.Settles), or malformed
// state bytes (wrapping ErrMalformedState); then next is nil.
func (l Limit) Adjust(state []byte, now, reservedAt, delta int64, dst []byte) (next []byte, err error) {
	g, err := l.check()
	if err != nil {
		return nil, err
	}
	next, _, err = l.adjust(&g, state, now, reservedAt, delta, dst)
	return next, err
}

// Settle is Adjust, and also returns the units it applied, which the decision service counts
// (never the units asked for). For a refund (delta < 0), the units given back: for a fixed window
// the units its count lost (0 when reservedAt is not in the current window or the count is 0), for
// a bucket the span its TAT moved back by in units, rounded up (0 for a full bucket; -delta, at
// most the capacity, when the bucket lacked at least that much). For an over-run (delta > 0), the
// units charged: delta, or less when the debt stopped at MaxDebt capacities (a bucket: the span
// its TAT moved on by in units, rounded up; a fixed window: what its count rose by). For a delta
// of 0, 0.
func (l Limit) Settle(state []byte, now, reservedAt, delta int64, dst []byte) (next []byte, applied int64, err error) {
	g, err := l.check()
	if err != nil {
		return nil, 0, err
	}
	return l.adjust(&g, state, now, reservedAt, delta, dst)
}

// adjust is Settle for a valid l whose bucket constants are g.
func (l Limit) adjust(g *gcraParams, state []byte, now, reservedAt, delta int64, dst []byte) (next []byte, applied int64, err error) {
	n := quantize(now)
	switch l.Kind {
	case TokenBucket, LeakyBucket:
		return l.adjustBucket(g, state, n, delta, dst)
	case FixedWindow:
		return l.adjustFixed(state, n, quantize(reservedAt), delta, dst)
	}
	return nil, 0, fmt.Errorf("algorithms: %v does not support settling a cost", l.Kind)
}

// adjustBucket applies delta to a bucket and returns the units applied (Settle): for a refund
// the units given back (refunded), for an over-run the units charged (charged).
func (l Limit) adjustBucket(g *gcraParams, state []byte, n, delta int64, dst []byte) ([]byte, int64, error) {
	now := rat{n, 0}
	tat := now
	if len(state) > 0 {
		var err error
		if tat, err = g.decode(state, l.Kind); err != nil {
			return nil, 0, err
		}
	}
	if tat.less(now) {
		tat = now
	}
	given := int64(0)
	switch {
	case delta > 0:
		was := tat
		tat = g.charge(tat, now, delta)
		given = g.charged(was, tat, delta)
	case delta < 0:
		was := tat
		back := g.times(min(-delta, g.c))
		if tat = g.sub(tat, back); tat.less(now) {
			tat = now
		}
		given = g.refunded(was, tat, min(-delta, g.c))
	}
	dst = append(dst[:0], header(l.Kind))
	dst = appendField(dst, tat.i)
	return appendField(dst, tat.f), given, nil
}

// refunded returns the units a refund of b <= Capacity units gave back when it moved the TAT
// from was back to tat (was - b×t <= tat <= was): b when it moved by all of them, else (the bucket
// is now full, tat is now) ceil((was - tat)/t), the units the bucket lacked of full, rounded up as
// the bucket's Remaining rounds down (Remaining grows by exactly that much). A full bucket gives
// back 0.
func (g *gcraParams) refunded(was, tat rat, b int64) int64 {
	span := g.sub(was, tat)
	if span == g.times(b) {
		return b
	}
	return g.ceilUnits(span) // span < b×t <= τ: < Capacity
}

// charged returns the units an over-run of delta units charged when it moved the TAT from was on
// to tat: delta when the TAT moved by all of it, else (it stopped at MaxDebt capacities of debt,
// or at the latest TAT a state holds) ceil((tat - was)/t).
func (g *gcraParams) charged(was, tat rat, delta int64) int64 {
	if whole := delta / g.c; whole <= MaxDebt+1 && g.sub(tat, was) == g.add(g.timesTau(whole), g.times(delta%g.c)) {
		return delta
	}
	if !was.less(tat) { // a now before the one that left the debt: the ceiling is below was
		return 0
	}
	return g.ceilUnits(g.sub(tat, was))
}

// ceilUnits returns ceil(span/t) for a span of at most (MaxDebt+1)×τ: the cost units it holds,
// rounded up.
func (g *gcraParams) ceilUnits(span rat) int64 {
	q, r := mulDivMod(span.i, g.q, g.w)
	r += span.f
	q += r / g.w
	if r%g.w != 0 {
		q++
	}
	return q
}

// adjustFixed applies delta to a fixed window and returns the units applied (Settle): for a
// refund the units the window's count lost, for an over-run what it rose by.
func (l Limit) adjustFixed(state []byte, n, reservedAt, delta int64, dst []byte) ([]byte, int64, error) {
	q := l.Quota
	s, k := n, int64(0)
	if len(state) > 0 {
		var err error
		if s, k, err = decodeFixed(state); err != nil {
			return nil, 0, err
		}
	}
	s, end, k := l.positionFixed(s, k, n)
	given := int64(0)
	switch {
	case delta > 0:
		ceiling := (MaxDebt + 1) * q
		was := k
		k = min(k+min(delta, ceiling), ceiling)
		given = max(k-was, 0)
	case delta < 0 && s <= reservedAt && reservedAt < end:
		given = min(k, min(-delta, q))
		k -= given
	}
	dst = append(dst[:0], header(FixedWindow))
	dst = appendField(dst, s)
	return appendField(dst, k), given, nil
}

// charge returns tat after an over-run of delta > 0 units at now (tat >= now): tat + delta×t, at
// most now + (MaxDebt+1)×τ and the latest TAT a state holds. delta is split into whole capacities
// (each τ) and a rest below one, so that no product passes what times handles.
func (g *gcraParams) charge(tat, now rat, delta int64) rat {
	ceiling := g.add(now, g.timesTau(MaxDebt+1))
	if last := (rat{maxTimeUs + maxWindowUs, 0}); last.less(ceiling) {
		ceiling = last
	}
	if whole := delta / g.c; whole > MaxDebt+1 { // past the ceiling from any tat >= now
		tat = ceiling
	} else {
		tat = g.add(g.add(tat, g.timesTau(whole)), g.times(delta%g.c))
	}
	if ceiling.less(tat) {
		tat = ceiling
	}
	return tat
}
