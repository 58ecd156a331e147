package algorithms

import (
	"encoding/binary"
	"fmt"
)

// Undo gives back a cost that Decide admitted at takenAt (unix nanoseconds), for a request that
// was then not served (a later rule denied it, or its answer is not one the rule counts), and
// appends the next state to dst[:0] (dst may be state itself). Unlike Adjust it supports every
// kind, because it removes a known admission rather than settling an estimate:
//   - a bucket's TAT moves back by the cost's emission time, never before now;
//   - a fixed window's count drops by the cost when takenAt lies in the current window (period):
//     once that window is gone, so is what the admission counted (an admission leaves the count
//     within the quota, so none of it is in a debt carried on);
//   - a sliding window counter's count of the window holding takenAt (the current or the previous
//     one) drops by the cost: the estimate is then what it would be had the request not come;
//   - a sliding log drops the cost oldest entries at or after takenAt, which are the admission's
//     own (Decide stamps them with the latest now it has seen, and no earlier entry is later) or,
//     when other admissions came at the same instant, entries equal to them; an admission that has
//     left the window has nothing left to give back.
//
// Nothing is given back below a fresh state, and an empty state is returned as it is. Undo of a
// cost that was never admitted gives away quota: callers undo only admissions they made. err is
// non-nil for an invalid Limit, a cost < 1, or malformed state bytes (wrapping ErrMalformedState).
func (l Limit) Undo(state []byte, now, takenAt, cost int64, dst []byte) (next []byte, err error) {
	g, err := l.check()
	if err != nil {
		return nil, err
	}
	next, _, err = l.undo(&g, state, now, takenAt, cost, oldestAfter, dst)
	return next, err
}

// GiveBack is the decision service's undo (its stores' SettleRequest with Undo), which may come
// twice or name a time no admission had: Undo, except that a sliding log gives back from one run
// of equal entries only, at most cost of them. With exact, takenAt is the admission's Decision.At
// (µs), the time a store's decision stamps its entries with, and the run is the entries stamped at
// exactly takenAt: never more than that instant holds and never an entry of a later admission, so a
// repeated undo, or one naming a time no admission had, gives nothing back. Without, takenAt is
// now minus an upper bound of the admission's age, and the run is the first at or after it.
//
// It also returns the units it gave back: for the windows and the log, the units the count or the
// log lost (0 when the admission's window has rolled over or its entries have expired or are
// gone); for a bucket, what Settle's refund of the cost gives back (the span its TAT moved back
// by, in units rounded up: 0 for a full bucket, at most the cost and the capacity).
func (l Limit) GiveBack(state []byte, now, takenAt, cost int64, exact bool, dst []byte) (next []byte, given int64, err error) {
	g, err := l.check()
	if err != nil {
		return nil, 0, err
	}
	m := firstRun
	if exact {
		m = exactRun
	}
	return l.undo(&g, state, now, takenAt, cost, m, dst)
}

// logUndo is how an undo picks the sliding log's entries it drops.
type logUndo uint8

const (
	oldestAfter logUndo = iota // Undo: the cost oldest at or after the time
	firstRun                   // GiveBack by age: of the first run at or after the time only
	exactRun                   // GiveBack by the admission's time: of the run at that time only
)

// undo is Undo (GiveBack: m other than oldestAfter) for a valid l whose bucket constants are g.
func (l Limit) undo(g *gcraParams, state []byte, now, takenAt, cost int64, m logUndo, dst []byte) (next []byte, given int64, err error) {
	if cost < 1 {
		return nil, 0, fmt.Errorf("algorithms: undo cost must be >= 1, got %d", cost)
	}
	if len(state) == 0 {
		return append(dst[:0], state...), 0, nil
	}
	n, at := quantize(now), quantize(takenAt)
	switch l.Kind {
	case TokenBucket, LeakyBucket:
		return l.adjustBucket(g, state, n, -cost, dst)
	case FixedWindow:
		return l.adjustFixed(state, n, at, -cost, dst)
	case SlidingLog:
		return l.undoLog(state, n, at, cost, m, dst)
	default:
		return l.undoSliding(state, n, at, cost, dst)
	}
}

func (l Limit) undoSliding(state []byte, n, at, cost int64, dst []byte) ([]byte, int64, error) {
	w := l.windowUs()
	s, p, k, err := decodeSliding(state)
	if err != nil {
		return nil, 0, err
	}
	s, _, shift := roll(s, n, w)
	switch shift {
	case 1:
		p, k = k, 0
	case 2:
		p, k = 0, 0
	}
	given := int64(0)
	switch {
	case s <= at && at < s+w:
		given = min(k, cost)
		k -= given
	case s-w <= at && at < s:
		given = min(p, cost)
		p -= given
	}
	dst = append(dst[:0], header(SlidingWindow))
	dst = appendField(dst, s)
	dst = appendField(dst, p)
	return appendField(dst, k), given, nil
}

// undoLog drops entries of the log at or after at, as m picks them.
func (l Limit) undoLog(state []byte, n, at, cost int64, m logUndo, dst []byte) ([]byte, int64, error) {
	s, err := decodeLog(state)
	if err != nil {
		return nil, 0, err
	}
	if at <= max(n, s.clock)-l.windowUs() { // the admission has expired: nothing of it is left
		return append(dst[:0], state...), 0, nil
	}
	from := s.firstLive(at - 1) // the first entry at or after at
	to := min(from+int(min(cost, int64(s.len()))), s.len())
	if m != oldestAfter {
		to = from
		for to < s.len() && s.at(to) == s.at(from) && (m == firstRun || s.at(to) == at) && int64(to-from) < cost {
			to++
		}
	}
	if from == to {
		return append(dst[:0], state...), 0, nil
	}
	// dst may be state: each part moves down or stays (append copies with memmove).
	out := append(dst[:0], header(SlidingLog))
	out = binary.BigEndian.AppendUint64(out, uint64(s.clock))
	out = append(out, s.entries[:8*from]...)
	return append(out, s.slice(to)...), int64(to - from), nil
}
