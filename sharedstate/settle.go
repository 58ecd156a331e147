package sharedstate

import (
	"encoding/binary"
	"fmt"

	"github.com/meshlimit/meshlimit/algorithms"
)

// Settler settles reservations against Tables through an Updater. It reuses its buffers, so one
// Settler serves one goroutine (one VM) at a time.
type Settler struct {
	c *Cursor
	e adjustEditor
}

// NewSettler returns a Settler that updates through u.
func NewSettler(u *Updater) *Settler { return &Settler{c: NewCursor(u)} }

// Adjust settles a reservation that Take admitted for key at reservedAt: it applies delta cost units
// to every limit of t without a decision (algorithms.Limit.Adjust: a negative delta refunds, a positive
// one is charged even past the limit: a bucket or a fixed window carries it whole, up to algorithms.MaxDebt capacities
// of debt). placement is the Outcome.Placement of
// that Take: a reservation taken from the overflow state is settled there. A refund for a key that no
// longer owns a record (its state went idle and was evicted) has nothing left to refund and writes
// nothing; a charge for such a key claims a record as Take would, or is dropped when there is no room
// (reported as NoRoom). Every limit of t must settle (algorithms.Kind.Settles).
func (s *Settler) Adjust(t *Table, key []byte, placement Placement, now, reservedAt, delta int64) (Result, error) {
	return s.edit(t, key, placement, now, reservedAt, delta, false)
}

// Undo gives back cost units that Take admitted for key at takenAt with placement, for a request
// that was not served after all (a later rule denied it; its answer is not one the rule counts): every
// limit of t, of any kind, is as it would be had the admission not been made (algorithms.Limit.Undo),
// whatever other VMs admitted since. A key that no longer owns a record has nothing to give back.
func (s *Settler) Undo(t *Table, key []byte, placement Placement, now, takenAt, cost int64) (Result, error) {
	return s.edit(t, key, placement, now, takenAt, -cost, true)
}

func (s *Settler) edit(t *Table, key []byte, placement Placement, now, at, delta int64, undo bool) (Result, error) {
	e := &s.e
	e.limits, e.layout, e.now, e.at, e.delta, e.undo, e.shared = t.limits, &t.layout, now, at, delta, undo, placement == Overflow
	if cap(e.states) < len(t.limits) {
		e.states = make([][]byte, len(t.limits))
	}
	e.states = e.states[:len(t.limits)]
	if placement == Overflow {
		e.limits, e.layout = t.overflow, &t.overLayout
		e.states = e.states[:len(t.overflow)]
		return s.c.UpdateShared(t.overflowKey, e)
	}
	return s.c.Update(t.records, key, e)
}

// adjustEditor is the Editor of one Adjust.
type adjustEditor struct {
	limits         []algorithms.Prepared
	layout         *layout
	now, at, delta int64
	undo           bool // Undo (algorithms.Limit.Undo of -delta) rather than Adjust
	shared         bool // the overflow state: an over-run is charged up to one capacity (overRun)
	states         [][]byte
	scratch        []byte
}

// Vacant implements Editor as Take does: every state of the payload is idle.
func (e *adjustEditor) Vacant(payload []byte) bool {
	return vacant(payload, e.limits, e.layout, e.states, e.now)
}

// Edit implements Editor: each limit's state is adjusted; a refund on a fresh record writes nothing.
func (e *adjustEditor) Edit(dst, cur []byte) ([]byte, bool, error) {
	fresh := !e.layout.split(cur, e.states)
	if fresh && e.delta <= 0 {
		return dst, false, nil
	}
	dst = append(dst, byte(len(e.limits)))
	for i := range e.limits {
		lim := &e.limits[i]
		var st []byte
		if !fresh {
			st = e.states[i]
		}
		var next []byte
		var err error
		if e.undo {
			next, err = lim.Undo(st, e.now, e.at, -e.delta, e.scratch[:0])
		} else {
			next, err = lim.Adjust(st, e.now, e.at, e.overRun(lim.Capacity()), e.scratch[:0])
		}
		if err != nil {
			return dst, false, fmt.Errorf("sharedstate: limit %d: %w", i, err)
		}
		e.scratch = next
		dst = binary.AppendUvarint(dst, uint64(len(next)))
		dst = append(dst, next...)
	}
	return dst, true, nil
}

// overRun is the delta a limit of the given capacity is adjusted by. The overflow state is every
// slotless key's together, so an over-run settled there is charged up to one capacity: a key that
// mints its way into the overflow cannot leave every newcomer in debt for algorithms.MaxDebt
// windows with one request (it must spend the overflow's quota each window, as it could by taking
// it), while a key with its own record carries its whole over-run.
func (e *adjustEditor) overRun(capacity int64) int64 {
	if e.shared && e.delta > capacity {
		return capacity
	}
	return e.delta
}
