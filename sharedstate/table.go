package sharedstate

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"unsafe"

	"github.com/meshlimit/meshlimit/algorithms"
	"github.com/meshlimit/meshlimit/internal/fnv"
)

// Table holds the limit states of one rule's keys in a Records set, so that memory stays bounded
// however many distinct keys (client IPs, API keys) arrive. A key's record holds its state for each of
// the table's limits. A request for key k:
//
//  1. is decided against k's own record when k owns one of its candidate slots (see Records);
//  2. otherwise claims a candidate that is empty, or whose owner is idle in every limit (its state is
//     the same as a fresh one, so nothing is lost by forgetting it): an eviction;
//  3. otherwise (every candidate owned by a key that is still active) is decided against the table's
//     overflow state, one state that every key without room shares, under the overflow limits (by
//     default the table's own limits: all such keys together get one key's quota). This is counted
//     (Outcome.Placement is Overflow) and lasts until either candidate's owner goes idle.
//
// Isolation: a key that owns its slot is decided exactly as if it were the only key, whatever any
// number of other keys do; nothing is ever written into another key's state. What minting keys can do
// is fill the table (see the package documentation for its cost) and crowd newcomers into the overflow
// state. Size Slots to at least twice the number of keys active at once within one window.
type Table struct {
	records     *Records
	limits      []algorithms.Prepared // prepared once: a decision only adds and compares
	overflow    []algorithms.Prepared
	layout      layout // where the limits' states lie in a record, when their sizes are fixed
	overLayout  layout // the overflow limits'
	overflowKey string
}

// NewTable returns a table of slots slots for the given limits, stored under keys that start with
// prefix (which should name the plugin, the rule and a fingerprint of the limits, so that a changed
// limit starts from fresh state). Keys without room are decided against overflow (nil: the limits
// themselves). Every limit must be valid.
func NewTable(prefix string, slots int, limits, overflow []algorithms.Limit) (*Table, error) {
	records, err := NewRecords(prefix, slots)
	if err != nil {
		return nil, err
	}
	t := &Table{records: records}
	if t.limits, err = prepareLimits("limit", limits); err != nil {
		return nil, err
	}
	if overflow == nil {
		overflow, t.overflow = limits, t.limits
	} else if t.overflow, err = prepareLimits("overflow limit", overflow); err != nil {
		return nil, err
	}
	t.layout, t.overLayout = newLayout(t.limits), newLayout(t.overflow)
	// The overflow state's key names its limits, so that changed overflow limits start fresh.
	t.overflowKey = records.OverflowKey() + "/" + strconv.FormatUint(fnv.AddBytes(fnv.Offset64, appendLimitsText(nil, overflow)), 36)
	return t, nil
}

// appendLimitsText appends limits as fmt's %v writes them ("[{token_bucket 10 1s 5 none} ...]"),
// the text the overflow key has always hashed, without linking fmt's reflection-driven printer at
// configure time (the most expensive function of a V8 cold start to compile).
func appendLimitsText(dst []byte, limits []algorithms.Limit) []byte {
	dst = append(dst, '[')
	for i, l := range limits {
		if i > 0 {
			dst = append(dst, ' ')
		}
		dst = append(dst, '{')
		dst = append(dst, l.Kind.String()...)
		dst = strconv.AppendInt(append(dst, ' '), l.Quota, 10)
		dst = append(append(dst, ' '), l.Window.String()...)
		dst = strconv.AppendInt(append(dst, ' '), l.Burst, 10)
		dst = append(append(dst, ' '), l.Calendar.String()...)
		dst = append(dst, '}')
	}
	return append(dst, ']')
}

// Alike returns a table of t's slots and limits stored under keys that start with prefix, as
// NewTable(prefix, slots, limits, overflow) with t's would, sharing t's prepared limits and layouts:
// many tables of the same limits (one per override of a tier) hold them once.
func (t *Table) Alike(prefix string) (*Table, error) {
	records, err := NewRecords(prefix, int(t.records.slots))
	if err != nil {
		return nil, err
	}
	u := *t
	u.records = records
	u.overflowKey = records.OverflowKey() + t.overflowKey[len(t.records.OverflowKey()):]
	return &u, nil
}

// prepareLimits validates and prepares a table's limits (see algorithms.Prepared).
func prepareLimits(what string, limits []algorithms.Limit) ([]algorithms.Prepared, error) {
	if len(limits) == 0 || len(limits) > 255 {
		return nil, fmt.Errorf("sharedstate: a table needs 1 to 255 %ss, got %d", what, len(limits))
	}
	ps := make([]algorithms.Prepared, len(limits))
	for i, l := range limits {
		p, err := l.Prepare()
		if err != nil {
			return nil, fmt.Errorf("sharedstate: %s %d: %w", what, i, err)
		}
		ps[i] = p
	}
	return ps, nil
}

// Outcome is the result of Limiter.Take.
type Outcome struct {
	// Allowed reports whether every limit admitted the request; only then was any state consumed.
	Allowed bool
	// Decisions holds one decision per limit, in order: of the table's limits, or of its overflow
	// limits when Placement is Overflow. When the request was denied, the limits that would have
	// admitted it report their state without it (algorithms.Limit.Peek: its remaining and its reset),
	// since nothing was consumed. The slice is reused by the next Take.
	Decisions []algorithms.Decision
	// Attempts is the number of read-decide-write rounds taken (1 without contention).
	Attempts int
	// Placement says whose state decided: the key's own (Owned, Claimed, Evicted) or the table's
	// overflow state (Overflow).
	Placement Placement
	// Cost is the cost the request was decided with (TakeBounded: its bound in the overflow state).
	Cost int64
}

// Limiter decides requests against Tables through an Updater. It reuses its buffers, so one Limiter
// serves one goroutine (one VM) at a time.
type Limiter struct {
	c     *Cursor
	ed    limitEditor
	local []byte // TakeLocal's next record
}

// NewLimiter returns a Limiter that updates through u.
func NewLimiter(u *Updater) *Limiter { return &Limiter{c: NewCursor(u)} }

// Updater returns the Updater the Limiter writes through.
func (l *Limiter) Updater() *Updater { return l.c.u }

// Take decides a request of the given cost for key at now (unix nanoseconds) against every limit of t,
// consuming from all of them only if all admit it. It returns ErrContention when every attempt lost a
// CAS race, and wraps store errors; the caller's failure mode decides what such a request gets.
func (l *Limiter) Take(t *Table, key []byte, now, cost int64) (Outcome, error) {
	return l.TakeBounded(t, key, now, cost, cost)
}

// TakeBounded is Take for a reservation of cost whose real cost may reach bound (>= cost): a key
// with a record of its own reserves cost, and a key decided in the shared overflow state reserves
// bound, so that what such a key turns out to use is never owed to the state every slotless key
// shares (a settled over-run there would be either every newcomer's debt or forgiven). Outcome.Cost
// is what was reserved.
func (l *Limiter) TakeBounded(t *Table, key []byte, now, cost, bound int64) (Outcome, error) {
	return l.takeBounded(t, key, now, cost, bound, &l.ed)
}

// takeBounded is TakeBounded, editing records of a fixed layout in place through ip (nil: every
// record is parsed and written anew, as the builds before in-place edits did; tests compare both).
func (l *Limiter) takeBounded(t *Table, key []byte, now, cost, bound int64, ip inPlaceEditor) (Outcome, error) {
	l.ed.reset(t.limits, &t.layout, now, cost)
	res, err := l.c.update(t.records, key, &l.ed, ip)
	out := Outcome{Attempts: res.Attempts, Placement: res.Placement, Cost: cost}
	if err == nil && res.Placement == NoRoom {
		out.Cost = max(cost, bound)
		l.ed.reset(t.overflow, &t.overLayout, now, out.Cost)
		res, err = l.c.updateShared(t.overflowKey, &l.ed, ip)
		out.Attempts += res.Attempts
		out.Placement = Overflow
	}
	if err == nil && l.ed.err != nil {
		err = l.ed.err
	}
	out.Allowed, out.Decisions = l.ed.allowed, l.ed.decisions
	return out, err
}

// limitEditor is the Editor of one Take: it decides the request against a record's states.
type limitEditor struct {
	limits    []algorithms.Prepared
	layout    *layout
	now, cost int64
	allowed   bool
	err       error
	decisions []algorithms.Decision
	states    [][]byte
	scratch   []byte
}

func (e *limitEditor) reset(limits []algorithms.Prepared, lay *layout, now, cost int64) {
	e.limits, e.layout, e.now, e.cost, e.allowed, e.err = limits, lay, now, cost, false, nil
	if cap(e.decisions) < len(limits) {
		e.decisions = make([]algorithms.Decision, len(limits))
	}
	e.decisions = e.decisions[:len(limits)]
	if cap(e.states) < len(limits) {
		e.states = make([][]byte, len(limits))
	}
	e.states = e.states[:len(limits)]
}

// Vacant implements Editor: a record is vacant when every state in it is idle (or it cannot be read).
func (e *limitEditor) Vacant(payload []byte) bool {
	return vacant(payload, e.limits, e.layout, e.states, e.now)
}

// Edit implements Editor: every limit decides on its state (a fresh one when cur is empty or
// unreadable), and the new states are written only when all admit the request.
func (e *limitEditor) Edit(dst, cur []byte) ([]byte, bool, error) {
	fresh := !e.layout.split(cur, e.states)
	dst = append(dst, byte(len(e.limits)))
	e.allowed = true
	for i := range e.limits {
		var st []byte
		if !fresh {
			st = e.states[i]
		}
		next, d, err := e.decide(i, st, e.scratch[:0])
		if err != nil {
			e.err = fmt.Errorf("sharedstate: limit %d: %w", i, err)
			e.allowed = false
			return dst, false, nil
		}
		e.scratch = next
		e.decisions[i] = d
		e.allowed = e.allowed && d.Allowed
		dst = binary.AppendUvarint(dst, uint64(len(next)))
		dst = append(dst, next...)
	}
	if !e.allowed {
		// Nothing was consumed: a limit that would have admitted the request reports its state as it
		// is (remaining and reset without this request), not the decision that charged it.
		for i := range e.limits {
			if !e.decisions[i].Allowed {
				continue
			}
			var st []byte
			if !fresh {
				st = e.states[i]
			}
			d, err := e.peek(i, st)
			if err != nil {
				e.err = fmt.Errorf("sharedstate: limit %d: %w", i, err)
				return dst, false, nil
			}
			e.decisions[i] = d
		}
		return dst, false, nil
	}
	return dst, true, nil
}

// decide is limit i's Decide on st (empty: fresh) into dst. A state that does not decode, which
// only a buggy or hostile writer of the shared data leaves (every VM of every build writes states
// the algorithms decode), is decided as a fresh one and so replaced by a valid state when the
// request is admitted: refusing it with an error instead would leave the key to the rule's failure
// mode (allow, by default) on every request, for as long as nobody rewrote the record. A writer
// able to leave such a state could as well have written a fresh one, so this gives it nothing.
func (e *limitEditor) decide(i int, st, dst []byte) ([]byte, algorithms.Decision, error) {
	next, d, err := e.limits[i].Decide(st, e.now, e.cost, dst)
	if err != nil {
		return e.decideFresh(i, st, dst, err)
	}
	return next, d, nil
}

// decideFresh is decide's path for a Decide that failed with err: again on a fresh state when st
// does not decode. A state that does not decode is refused before anything is written to dst, so
// dst may alias st.
func (e *limitEditor) decideFresh(i int, st, dst []byte, err error) ([]byte, algorithms.Decision, error) {
	if len(st) > 0 && errors.Is(err, algorithms.ErrMalformedState) {
		return e.limits[i].Decide(nil, e.now, e.cost, dst)
	}
	return nil, algorithms.Decision{}, err
}

// peek is limit i's Peek on st, a state that does not decode read as a fresh one (see decide).
func (e *limitEditor) peek(i int, st []byte) (algorithms.Decision, error) {
	d, err := e.limits[i].Peek(st, e.now)
	if err != nil && len(st) > 0 && errors.Is(err, algorithms.ErrMalformedState) {
		return e.limits[i].Peek(nil, e.now)
	}
	return d, err
}

// parseStates splits a payload (a count, then each state with its uvarint length) into states, whose
// length is the expected count. It reports false for an empty or unreadable payload.
func parseStates(p []byte, states [][]byte) bool {
	if len(p) < 1 || int(p[0]) != len(states) {
		return false
	}
	rest := p[1:]
	for i := range states {
		size, k := binary.Uvarint(rest)
		if k <= 0 || uint64(len(rest)-k) < size {
			return false
		}
		states[i] = rest[k : k+int(size)]
		rest = rest[k+int(size):]
	}
	return len(rest) == 0
}

// bytesString views b as a string without copying. The string is only passed to Store methods, which
// must not keep it (a store keeps a copy of the keys it stores; the host copies them).
func bytesString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// vacant reports whether a record's payload holds only idle states of limits at now (or cannot be
// read): such a record is as good as fresh, so another key may take its slot. states is scratch.
func vacant(payload []byte, limits []algorithms.Prepared, lay *layout, states [][]byte, now int64) bool {
	if !lay.split(payload, states) {
		return true
	}
	for i := range limits {
		if !limits[i].IdleAt(states[i], now) {
			return false
		}
	}
	return true
}
