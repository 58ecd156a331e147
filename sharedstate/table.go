package sharedstate

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"unsafe"

	"github.com/meshlimit/meshlimit/algorithms"
)

// slotVersion is the first byte of every slot value. A change of layout changes it, and the key prefix
// carries it too, so two plugin versions sharing a vm_id never read each other's slots.
const slotVersion = 1

// MaxSlots bounds Table sizes: 2^20 slots of a few dozen bytes each is far more than a proxy should
// hold for one rule.
const MaxSlots = 1 << 20

// Table is a fixed set of shared-data slots that holds the states of one rule's keys, so that memory
// stays bounded however many distinct keys (client IPs, API keys) arrive: Envoy's shared data can never
// delete a key, but a table never has more than Slots keys.
//
// Each key value hashes to two candidate slots. A slot stores the 64-bit fingerprint of the key that
// occupies it and that key's state for each of the table's limits. A request for key k:
//
//  1. uses the candidate that k already occupies, if any;
//  2. otherwise claims a candidate that is empty or whose occupant is idle (its state is the same as a
//     fresh one, so nothing is lost by forgetting it), the first candidate first;
//  3. otherwise (both candidates held by other keys that are still active) is decided against the first
//     candidate's state, as if it were that key. This is a collision: it is counted (Outcome.Collided),
//     it never admits more than the slot's limit, and it can deny k early. It disappears as soon as
//     either occupant goes idle. Size Slots to at least twice the number of keys active at once (within
//     one limit window) to keep collisions rare.
//
// Two different keys with the same 64-bit fingerprint share one state (chance ~n²/2^65).
type Table struct {
	prefix string
	slots  uint32
	seed   uint64
	limits []algorithms.Limit
}

// NewTable returns a table of slots slots for the given limits, stored under keys that start with
// prefix (which should name the plugin, the rule and a fingerprint of the limits, so that a changed
// limit starts from fresh state). Every limit must be valid.
func NewTable(prefix string, slots int, limits []algorithms.Limit) (*Table, error) {
	if slots < 1 || slots > MaxSlots {
		return nil, fmt.Errorf("sharedstate: table slots must be in [1, %d], got %d", MaxSlots, slots)
	}
	if len(limits) == 0 || len(limits) > 255 {
		return nil, fmt.Errorf("sharedstate: a table needs 1 to 255 limits, got %d", len(limits))
	}
	for i, l := range limits {
		if err := l.Validate(); err != nil {
			return nil, fmt.Errorf("sharedstate: limit %d: %w", i, err)
		}
	}
	p := prefix + "/v" + strconv.Itoa(slotVersion) + "/"
	return &Table{prefix: p, slots: uint32(slots), seed: fnv64(fnvOffset, []byte(p)), limits: append([]algorithms.Limit(nil), limits...)}, nil
}

// Slots is the number of slots, the bound on the keys the table ever creates.
func (t *Table) Slots() int { return int(t.slots) }

// Limits returns the table's limits. The slice must not be modified.
func (t *Table) Limits() []algorithms.Limit { return t.limits }

// SlotKey appends the shared-data key of slot i to dst.
func (t *Table) SlotKey(dst []byte, i int) []byte {
	dst = append(dst, t.prefix...)
	return strconv.AppendUint(dst, uint64(i), 36)
}

// candidates returns the fingerprint of key and its two candidate slots (equal only when the table has
// one slot).
func (t *Table) candidates(key []byte) (fp uint64, a, b uint32) {
	fp = fnv64(t.seed, key)
	fp ^= fp >> 29 // FNV's low bits mix poorly; fold the high ones in before taking remainders
	fp *= 0xbf58476d1ce4e5b9
	fp ^= fp >> 32
	a = uint32(fp % uint64(t.slots))
	if t.slots == 1 {
		return fp, a, a
	}
	b = uint32((fp >> 20) % uint64(t.slots-1))
	if b >= a {
		b++
	}
	return fp, a, b
}

const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

func fnv64(h uint64, b []byte) uint64 {
	for _, c := range b {
		h ^= uint64(c)
		h *= fnvPrime
	}
	return h
}

// Outcome is the result of Limiter.Take.
type Outcome struct {
	// Allowed reports whether every limit admitted the request; only then was any state consumed.
	Allowed bool
	// Decisions holds one decision per limit of the table, in order. When the request was denied, the
	// limits that would have admitted it report what remains without it. The slice is reused by the
	// next Take.
	Decisions []algorithms.Decision
	// Attempts is the number of read-decide-write rounds taken (1 without contention).
	Attempts int
	// Collided reports that the key was decided against another active key's slot (see Table).
	Collided bool
	// Repaired reports that an unreadable slot value was replaced.
	Repaired bool
}

// Limiter decides requests against Tables through an Updater. It reuses its buffers, so one Limiter
// serves one goroutine (one VM) at a time.
type Limiter struct {
	u         *Updater
	keyA      []byte
	keyB      []byte
	next      []byte
	scratch   []byte
	states    [][]byte
	decisions []algorithms.Decision
}

// NewLimiter returns a Limiter that updates through u.
func NewLimiter(u *Updater) *Limiter { return &Limiter{u: u} }

// Updater returns the Updater the Limiter writes through.
func (l *Limiter) Updater() *Updater { return l.u }

// slot is one parsed slot value.
type slot struct {
	fp     uint64
	states [][]byte // aliases the value read from the store
	ok     bool     // the value parsed; false for a missing or unreadable slot
}

// Take decides a request of the given cost for key at now (unix nanoseconds) against every limit of t,
// consuming from all of them only if all admit it. It returns ErrContention when every attempt lost a
// CAS race, and wraps store errors; the caller's failure mode decides what such a request gets.
func (l *Limiter) Take(t *Table, key []byte, now, cost int64) (Outcome, error) {
	fp, a, b := t.candidates(key)
	l.keyA = t.SlotKey(l.keyA[:0], int(a))
	l.keyB = t.SlotKey(l.keyB[:0], int(b))
	out := Outcome{}
	for out.Attempts < l.u.maxAttempts {
		out.Attempts++
		va, casA, err := l.u.Read(bytesString(l.keyA))
		if err != nil {
			return out, err
		}
		sa, repairedA := parseSlot(va, len(t.limits), &l.states, 0)
		if sa.ok && sa.fp == fp {
			done, err := l.decide(t, &out, l.keyA, casA, fp, sa.states, now, cost)
			if done || err != nil {
				return out, err
			}
			continue
		}
		target, targetCas, states, occupant := l.keyA, casA, [][]byte(nil), fp
		if a != b {
			vb, casB, err := l.u.Read(bytesString(l.keyB))
			if err != nil {
				return out, err
			}
			sb, repairedB := parseSlot(vb, len(t.limits), &l.states, len(t.limits))
			switch {
			case sb.ok && sb.fp == fp:
				target, targetCas, states = l.keyB, casB, sb.states
			case free(t, sa, now):
				out.Repaired = repairedA
			case free(t, sb, now):
				target, targetCas, out.Repaired = l.keyB, casB, repairedB
			default:
				states, occupant, out.Collided = sa.states, sa.fp, true
			}
		} else if !free(t, sa, now) {
			states, occupant, out.Collided = sa.states, sa.fp, true
		} else {
			out.Repaired = repairedA
		}
		done, err := l.decide(t, &out, target, targetCas, occupant, states, now, cost)
		if done || err != nil {
			return out, err
		}
	}
	return out, ErrContention
}

// free reports whether a slot may be claimed: missing, unreadable, or idle in every limit.
func free(t *Table, s slot, now int64) bool {
	if !s.ok {
		return true
	}
	for i, l := range t.limits {
		if !l.IdleAt(s.states[i], now) {
			return false
		}
	}
	return true
}

// decide runs every limit on states (nil states mean fresh ones) and, when all admit the request,
// writes the new states to slotKey under occupant's fingerprint with cas. It reports done=false when
// the write lost a CAS race and the caller should try again.
func (l *Limiter) decide(t *Table, out *Outcome, slotKey []byte, cas uint32, occupant uint64, states [][]byte, now, cost int64) (done bool, err error) {
	n := len(t.limits)
	if cap(l.decisions) < n {
		l.decisions = make([]algorithms.Decision, n)
	}
	out.Decisions = l.decisions[:n]
	l.next = append(l.next[:0], slotVersion)
	l.next = binary.LittleEndian.AppendUint64(l.next, occupant)
	l.next = append(l.next, byte(n))
	out.Allowed = true
	for i, lim := range t.limits {
		var st []byte
		if states != nil {
			st = states[i]
		}
		next, d, err := lim.Decide(st, now, cost, l.scratch[:0])
		if err != nil {
			return true, fmt.Errorf("sharedstate: limit %d: %w", i, err)
		}
		l.scratch = next
		out.Decisions[i] = d
		out.Allowed = out.Allowed && d.Allowed
		l.next = binary.AppendUvarint(l.next, uint64(len(next)))
		l.next = append(l.next, next...)
	}
	if !out.Allowed {
		for i := range out.Decisions {
			if out.Decisions[i].Allowed { // nothing was consumed: report what remains without this request
				out.Decisions[i].Remaining += cost
			}
		}
		return true, nil
	}
	err = l.u.Write(bytesString(slotKey), l.next, cas)
	if errors.Is(err, ErrCasMismatch) {
		return false, nil
	}
	return true, err
}

// parseSlot parses a slot value with n states, storing the state sub-slices in (*buf)[off:off+n]. It
// reports repaired=true when a non-empty value could not be parsed (and is therefore free to claim).
func parseSlot(v []byte, n int, buf *[][]byte, off int) (s slot, repaired bool) {
	if len(v) == 0 {
		return slot{}, false
	}
	if len(*buf) < off+n {
		grown := make([][]byte, 2*n)
		copy(grown, *buf)
		*buf = grown
	}
	if len(v) < 10 || v[0] != slotVersion || int(v[9]) != n {
		return slot{}, true
	}
	s.fp = binary.LittleEndian.Uint64(v[1:9])
	rest := v[10:]
	s.states = (*buf)[off : off+n]
	for i := range n {
		size, k := binary.Uvarint(rest)
		if k <= 0 || uint64(len(rest)-k) < size {
			return slot{}, true
		}
		s.states[i] = rest[k : k+int(size)]
		rest = rest[k+int(size):]
	}
	if len(rest) != 0 {
		return slot{}, true
	}
	s.ok = true
	return s, false
}

// bytesString views b as a string without copying. The string is only passed to Store methods, which
// must not keep it (MemStore clones keys it stores; the host copies them).
func bytesString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }
