package sharedstate

import (
	"errors"
	"fmt"

	"github.com/meshlimit/meshlimit/algorithms"
)

// layout is where a table's states lie in its record's payload when every limit's state has a
// fixed size (algorithms.Prepared.StateSize): the payload format stays the general one (a count
// byte, then each state after its uvarint length, see parseStates), but with fixed sizes below 128
// every length is one byte and every state starts at an offset known when the table is made. A
// payload with exactly that shape is then edited where it lies, in the buffer the store filled
// (limitEditor.EditInPlace): no parse, no re-serialization, the record's header kept as read.
// Any other payload, including one written by a buggy or hostile VM with the right length and
// the wrong length bytes, takes the general path, which refuses what it cannot parse.
//
// The bytes are those the general path writes, so VMs of a build without layouts (or with
// them) read and write each other's records during a rollout: the format did not change.
type layout struct {
	size int      // the payload's size; 0: no fixed layout (a sliding log among the limits)
	offs []uint16 // where limit i's state starts; its length byte is the one before it
	lens []uint8  // limit i's state size
}

// maxLayout bounds a fixed layout's payload (every offset fits a uint16).
const maxLayout = 1 << 15

// newLayout returns the fixed layout of limits, or the zero layout when one has no fixed size.
func newLayout(limits []algorithms.Prepared) layout {
	l := layout{size: 1, offs: make([]uint16, len(limits)), lens: make([]uint8, len(limits))}
	for i := range limits {
		n := limits[i].StateSize()
		if n <= 0 || n >= 0x80 || l.size+1+n > maxLayout {
			return layout{}
		}
		l.offs[i], l.lens[i] = uint16(l.size+1), uint8(n)
		l.size += 1 + n
	}
	return l
}

// matches reports whether p has the layout's exact shape: its size, the count of states and every
// state's length byte. The states' contents are the algorithms' to check (they refuse a malformed
// state with an error, never a wrong decision).
func (l *layout) matches(p []byte) bool {
	if l.size == 0 || len(p) != l.size || int(p[0]) != len(l.offs) {
		return false
	}
	for i, off := range l.offs {
		if p[off-1] != l.lens[i] {
			return false
		}
	}
	return true
}

// state returns limit i's state in a payload that matches the layout.
func (l *layout) state(p []byte, i int) []byte {
	off := int(l.offs[i])
	return p[off : off+int(l.lens[i]) : off+int(l.lens[i])]
}

// split is parseStates for a table of this layout: the states of p at their fixed offsets when p
// matches, or as parseStates finds them otherwise.
func (l *layout) split(p []byte, states [][]byte) bool {
	if !l.matches(p) {
		return parseStates(p, states)
	}
	for i := range states {
		states[i] = l.state(p, i)
	}
	return true
}

// EditInPlace implements inPlaceEditor: when the payload has the table's fixed layout, every limit
// decides on its state where it lies (algorithms.Prepared.DecideInPlace): no parse, no
// re-serialization, no copy of a state. On a denial the states hold what the deciding left in them,
// which is never written back: the buffer is the next read's. With more than one limit, the payload
// as read is first copied once to scratch, so that the limits that would have admitted a denied
// request report their state without it, from the payload as it was (as Edit does). It reports
// ok=false, having changed nothing, for any other payload.
func (e *limitEditor) EditInPlace(p []byte) (write, ok bool) {
	if !e.layout.matches(p) {
		return false, false
	}
	if len(e.limits) == 1 {
		return e.editOne(e.layout.state(p, 0))
	}
	return e.editEach(p, false)
}

// editInScratch is EditInPlace for a payload that must stay as it was unless every limit admits
// (TakeLocal's record, which the caller keeps): a denial puts the payload as read back.
func (e *limitEditor) editInScratch(p []byte) (write, ok bool) {
	if !e.layout.matches(p) {
		return false, false
	}
	return e.editEach(p, true)
}

// editOne decides the table's one limit on st where it lies and reports whether to write the record.
func (e *limitEditor) editOne(st []byte) (write, ok bool) {
	if err := e.limits[0].DecideInPlace(st, e.now, e.cost, &e.decisions[0]); err != nil {
		if err = e.decideFreshInPlace(0, st, err); err != nil {
			e.err, e.allowed = fmt.Errorf("sharedstate: limit 0: %w", err), false
			return false, true
		}
	}
	e.allowed = e.decisions[0].Allowed
	return e.allowed, true
}

// editEach decides every limit where its state lies, after one copy of the payload to scratch from
// which a denial reports the limits that would have admitted (and, when restore is set, which it
// puts back).
func (e *limitEditor) editEach(p []byte, restore bool) (write, ok bool) {
	if cap(e.scratch) < len(p) {
		e.scratch = make([]byte, len(p))
	}
	old := e.scratch[:len(p)]
	copy(old, p)
	e.allowed = true
	for i := 0; i < len(e.limits); i++ { // one call for the limits up to one that fails, if any
		failed, allowed, err := algorithms.DecideEachInPlace(e.limits[i:], p, e.layout.offs[i:], e.now, e.cost, e.decisions[i:])
		e.allowed = e.allowed && allowed
		if i += failed; err == nil {
			break
		}
		if err = e.decideFreshInPlace(i, e.layout.state(p, i), err); err != nil {
			e.err, e.allowed = fmt.Errorf("sharedstate: limit %d: %w", i, err), false
			break
		}
		e.allowed = e.allowed && e.decisions[i].Allowed
	}
	if e.allowed {
		return true, true
	}
	if restore {
		copy(p, old)
	}
	if e.err != nil {
		return false, true
	}
	for i := range e.limits {
		if !e.decisions[i].Allowed {
			continue
		}
		d, err := e.peek(i, e.layout.state(old, i))
		if err != nil {
			e.err = fmt.Errorf("sharedstate: limit %d: %w", i, err)
			return false, true
		}
		e.decisions[i] = d
	}
	return false, true
}

// decideFreshInPlace is decide's path for a state of a fixed layout that DecideInPlace refused with
// err: a state that does not decode is decided as a fresh one, where it lies (see decide).
func (e *limitEditor) decideFreshInPlace(i int, st []byte, err error) error {
	if !errors.Is(err, algorithms.ErrMalformedState) {
		return err
	}
	var next []byte
	next, e.decisions[i], err = e.limits[i].Decide(nil, e.now, e.cost, st[:0])
	if err == nil && len(next) != len(st) {
		err = fmt.Errorf("a state of %d bytes, want %d", len(next), len(st)) // never: algorithms.Prepared.StateSize
	}
	return err
}
