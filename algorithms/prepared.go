package algorithms

import (
	"errors"
	"fmt"
)

// Prepared is a valid Limit with what its decisions need computed once (Limit.Prepare): a
// configuration prepares its limits when it is loaded, and every request then decides on the
// prepared form. Its methods return exactly what the Limit's methods of the same name return, for
// every input; they only skip the work that depends on the limit alone (validating it, and for
// the buckets the emission interval and tolerance), and a bucket's decision divides in 64-bit
// arithmetic (a float64 estimate corrected by the exact remainder) where the Limit's divides a
// 128-bit product, a software loop on wasm.
//
// A Prepared is a plain value, safe for concurrent use. The zero Prepared is not valid: its
// methods report errUnprepared (IdleAt reports false, as for an invalid Limit).
type Prepared struct {
	l Limit
	g gcraParams
}

// errUnprepared is what a zero Prepared's methods report.
var errUnprepared = errors.New("algorithms: a Prepared limit must come from Limit.Prepare")

// Prepare validates l and computes its constants. The error is Validate's.
func (l Limit) Prepare() (Prepared, error) {
	g, err := l.check()
	if err != nil {
		return Prepared{}, err
	}
	g.prepared = true
	if l.Kind.bucket() {
		g.fit()
	}
	return Prepared{l: l, g: g}, nil
}

// Decide is Limit.Decide. For a limit with a fixed StateSize, dst may be state[:0]: a state is
// read (and refused, when it does not decode) before anything is written to dst, so the next state
// replaces the old one where it lies.
func (p *Prepared) Decide(state []byte, now int64, cost int64, dst []byte) (next []byte, d Decision, err error) {
	if p.l.Kind.bucket() && cost >= 1 { // what decide would call, one call sooner
		return p.l.decideBucket(&p.g, state, quantize(now), cost, dst)
	}
	if p.l.Kind == 0 {
		return nil, Decision{}, errUnprepared
	}
	return p.l.decide(&p.g, state, now, cost, dst)
}

// Peek is Limit.Peek.
func (p *Prepared) Peek(state []byte, now int64) (Decision, error) {
	if p.l.Kind == 0 {
		return Decision{}, errUnprepared
	}
	return p.l.peek(&p.g, state, now)
}

// Undo is Limit.Undo.
func (p *Prepared) Undo(state []byte, now, takenAt, cost int64, dst []byte) (next []byte, err error) {
	if p.l.Kind == 0 {
		return nil, errUnprepared
	}
	next, _, err = p.l.undo(&p.g, state, now, takenAt, cost, oldestAfter, dst)
	return next, err
}

// Adjust is Limit.Adjust.
func (p *Prepared) Adjust(state []byte, now, reservedAt, delta int64, dst []byte) (next []byte, err error) {
	if p.l.Kind == 0 {
		return nil, errUnprepared
	}
	next, _, err = p.l.adjust(&p.g, state, now, reservedAt, delta, dst)
	return next, err
}

// IdleAt is Limit.IdleAt.
func (p *Prepared) IdleAt(state []byte, now int64) bool {
	return p.l.Kind != 0 && p.l.idleAt(&p.g, state, now)
}

// Capacity is the prepared limit's Limit.Capacity.
func (p *Prepared) Capacity() int64 { return p.l.Capacity() }

// StateSize is the size in bytes of every state the prepared limit's Decide writes, and of every
// non-empty one its Adjust and Undo write (both leave an empty state empty): 17 for the buckets
// and the fixed window (calendar or not), 25 for the sliding window counter. It is 0 for a sliding log, whose state grows with its entries, and for a zero
// Prepared. A record of limits whose states all have a fixed size has a fixed layout, which a
// caller can edit where it lies (package sharedstate).
func (p *Prepared) StateSize() int {
	switch p.l.Kind {
	case TokenBucket, LeakyBucket:
		return bucketSize
	case FixedWindow:
		return fixedSize
	case SlidingWindow:
		return slidingSize
	}
	return 0
}

// errInPlaceSize is what DecideInPlace reports for a state of n bytes that is not StateSize's.
func errInPlaceSize(p *Prepared, n int) error {
	if p.StateSize() == 0 {
		return fmt.Errorf("algorithms: a %v state has no fixed size to decide in place", p.l.Kind)
	}
	return fmt.Errorf("algorithms: a %v state decided in place has %d bytes, want %d", p.l.Kind, n, p.StateSize())
}
