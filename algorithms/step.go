package algorithms

import "fmt"

// DecideInPlace is Decide with dst = state[:0] for a state that lies in a larger buffer (a record
// of several limits' states), with the decision written to *d instead of returned: the next state
// replaces the old one where it lies, and neither a slice nor a Decision is copied on the way. It
// requires a state of exactly StateSize bytes (what a fixed layout holds; an empty state is
// Decide(nil, …)'s), and reports an error for any other length.
//
// It decides exactly as Decide: for every input, DecideInPlace leaves in state the bytes Decide
// returns and in *d the Decision it returns, and it fails exactly when Decide fails, with the same
// error, having written nothing to state (*d is then the zero Decision).
func (p *Prepared) DecideInPlace(state []byte, now, cost int64, d *Decision) error {
	if p.l.Kind.bucket() && cost >= 1 && len(state) == bucketSize {
		err := p.l.stepBucket(&p.g, state, state, quantize(now), cost, d)
		if err != nil {
			*d = Decision{}
		}
		return err
	}
	return p.decideInPlace(state, now, cost, d)
}

// decideInPlace is DecideInPlace for the window kinds, and for what the buckets' fast path refuses.
func (p *Prepared) decideInPlace(state []byte, now, cost int64, d *Decision) error {
	if n := p.StateSize(); n == 0 || len(state) != n {
		*d = Decision{}
		if p.l.Kind == 0 {
			return errUnprepared
		}
		return errInPlaceSize(p, len(state))
	}
	next, dd, err := p.Decide(state, now, cost, state[:0])
	if err == nil && len(next) != len(state) { // never: StateSize is every state's size
		dd, err = Decision{}, fmt.Errorf("algorithms: a %v state of %d bytes decided into %d", p.l.Kind, len(state), len(next))
	}
	*d = dd
	return err
}

// DecideEachInPlace is DecideInPlace for every limit of a record of fixed layout, in one call (a
// call per limit costs on wasm what a decision does): for i from 0 it decides limits[i] on its state
// where it lies, record[offs[i]:offs[i]+limits[i].StateSize()], into ds[i] (len(ds) and len(offs) are
// at least len(limits)), exactly as limits[i].DecideInPlace would, until one fails. It returns
// failed = len(limits) and a nil error when none fails, else the index of the one that failed and its
// error, having decided the limits before it; and whether every limit it decided (before the one
// that failed) admitted the request.
// A state that does not fit in record fails with an error.
func DecideEachInPlace(limits []Prepared, record []byte, offs []uint16, now, cost int64, ds []Decision) (failed int, allowed bool, err error) {
	us := quantize(now)
	ds, offs = ds[:len(limits)], offs[:len(limits)]
	allowed = true
	for i := range limits {
		p, off := &limits[i], int(offs[i])
		end := off + p.StateSize()
		if end > len(record) {
			ds[i] = Decision{}
			return i, allowed, fmt.Errorf("algorithms: a %v state at %d of a record of %d bytes", p.l.Kind, off, len(record))
		}
		st := record[off:end:end]
		if p.l.Kind.bucket() && cost >= 1 && len(st) == bucketSize {
			err = p.l.stepBucket(&p.g, st, st, us, cost, &ds[i])
			if err != nil {
				ds[i] = Decision{}
			}
		} else {
			err = p.decideInPlace(st, now, cost, &ds[i])
		}
		if err != nil {
			return i, allowed, err
		}
		allowed = allowed && ds[i].Allowed
	}
	return len(limits), allowed, nil
}
