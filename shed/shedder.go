package shed

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// State is the shared record of one shedder: the requests in flight in each class, and the
// most in flight since the interval began. Slots of classes the Policy does not have (after a
// reconfiguration) still count towards the total until they are released. The zero State is
// empty.
type State struct {
	InFlight [MaxClasses]uint32
	// Peak is the most requests in flight at once since the last EndInterval: Admit raises
	// it. It is the Summary.InFlight of the interval.
	Peak uint32
}

// EndInterval returns the interval's peak in flight (at least the current total), and s with
// a new interval begun: its Peak is the current total.
func (s State) EndInterval() (State, int64) {
	peak := max(int64(s.Peak), s.Total())
	s.Peak = uint32(min(s.Total(), 1<<32-1))
	return s, peak
}

// Total returns the requests in flight in all classes.
func (s *State) Total() int64 {
	t := int64(0)
	for _, n := range s.InFlight {
		t += int64(n)
	}
	return t
}

// Decision is the outcome of Admit.
type Decision struct {
	// Admitted reports whether the request may proceed; the caller must Release it when its
	// response headers arrive (or when its stream ends without them). A shed request holds
	// nothing.
	Admitted bool
	// Class is the class the request was decided in (the lowest for an out-of-range index).
	Class int
	// InFlight is the total in flight before the decision.
	InFlight int64
	// Threshold is the occupancy the class was held to: the request was admitted exactly when
	// InFlight < Threshold (and, for AdmitKey, its key was under its KeySlots). It is
	// Threshold(capacity, class), except for the highest class when the classes below it hold
	// more than their threshold (see Admit).
	Threshold int64
	// KeyLimited reports that AdmitKey shed the request because its key already held its
	// KeySlots.
	KeyLimited bool
}

// Admit decides a request of class (an index from Class) at the given capacity (in-flight
// requests; clamped to [0, MaxCapacity]) against s. It returns s with the request counted in
// its class when admitted, and s unchanged when shed. A class out of range is decided as the
// lowest class. Admit does not allocate.
//
// A class below the highest is admitted exactly when s.Total() < p.Threshold(capacity, class).
// The highest class is held to Reserved(s, capacity) instead, which is the capacity itself
// unless the classes below it hold more than Threshold(capacity, 1) (after a drop of the
// capacity, which revokes nothing). Hence:
//   - the classes below the highest never take the total above the capacity, and the highest
//     class takes it above only by its reserve, ceil(capacity × Reserve/1000), over what the
//     lower classes hold;
//   - at the same occupancy, a class is never shed while a lower class is admitted
//     (thresholds never increase down the list);
//   - the highest class is admitted whenever it holds fewer than ceil(capacity × Reserve/1000)
//     requests, whatever the classes below it hold: its reserve survives any drop of the
//     capacity, and any stream that holds a lower class's slot for ever;
//   - for a fixed capacity C, the classes below class i never hold more than Threshold(C, i+1)
//     requests together, so class i is admitted whenever the classes from the highest down to
//     i hold fewer than Threshold(C, i) − Threshold(C, i+1) (its reserve).
//
// Only the highest class's reserve survives a drop of the capacity: below it, nothing in flight
// is revoked, and no class is admitted above its new threshold until requests end.
func (p *Policy) Admit(s State, capacity int64, class int) (State, Decision) {
	if class < 0 || class >= p.n {
		class = max(p.n-1, 0)
	}
	d := Decision{Class: class, InFlight: s.Total(), Threshold: p.Threshold(capacity, class)}
	if class == 0 {
		d.Threshold = p.Reserved(s, capacity)
	}
	if d.InFlight < d.Threshold { // so the counts stay below MaxCapacity: no overflow
		d.Admitted = true
		s.InFlight[class]++
		if n := d.InFlight + 1; n > int64(s.Peak) {
			s.Peak = uint32(n)
		}
	}
	return s, d
}

// Reserved returns the occupancy up to which the highest class is admitted at the given
// capacity C (clamped to [0, MaxCapacity]) against s: max(C, L + ceil(C × Reserve/1000)), with
// L the requests the classes below the highest hold and Reserve the highest class's. It is C
// while L stays within Threshold(C, 1), as it does while C is fixed; above that (after C
// dropped, or while streams hold lower slots for ever), the highest class still has its reserve
// on top of the L requests, and the lower classes are admitted nowhere (Threshold(C, 1) < L).
// With one class, it is the capacity.
func (p *Policy) Reserved(s State, capacity int64) int64 {
	c := min(max(capacity, 0), MaxCapacity)
	if p.n < 2 {
		return p.Threshold(c, 0)
	}
	lower := s.Total() - int64(s.InFlight[0])
	reserve := c - p.Threshold(c, 1)
	return min(max(c, lower+reserve), MaxCapacity)
}

// AdmitKey is Admit for a request whose key already holds keyHeld slots of this shedder: it is
// shed (KeyLimited), whatever its class, when keyHeld >= KeySlots(capacity), and decided by
// Admit otherwise. So no key ever gets a slot beyond ceil(capacity × KeyShare/1000) at the
// capacity of its admission; the caller adds one to the key's count when the request is
// admitted and removes it when it releases the request.
func (p *Policy) AdmitKey(s State, capacity int64, class int, keyHeld int64) (State, Decision) {
	next, d := p.Admit(s, capacity, class)
	if keyHeld >= p.KeySlots(capacity) {
		d.Admitted, d.KeyLimited = false, true
		return s, d
	}
	return next, d
}

// Release returns s with one request of class ended. Releasing a class with nothing in flight
// (a duplicate release, or one after a reclaim) changes nothing, so counts never underflow. A
// class out of range is the lowest class, as in Admit.
func (p *Policy) Release(s State, class int) State {
	if class < 0 || class >= p.n {
		class = max(p.n-1, 0)
	}
	if s.InFlight[class] > 0 {
		s.InFlight[class]--
	}
	return s
}

// Encoded states start with one byte, version<<4 | kind, followed by little-endian fixed-width
// fields (layouts in doc.go). Version 1 is the only version.
const (
	version = 1

	kindShedder    = 1
	kindController = 2
	kindHistogram  = 3
)

// StateSize is the length of an encoded State: a header byte, MaxClasses uint32 counts and the
// uint32 peak.
const StateSize = 1 + 4*MaxClasses + 4

// ErrMalformed is wrapped by every decoding error: a wrong length, version or kind, or a field
// out of range. The bytes cannot be trusted; callers usually start from a zero value.
var ErrMalformed = errors.New("shed: malformed state")

// AppendBinary appends the StateSize-byte encoding of s to dst and returns it; it does not
// allocate when dst has room.
func (s *State) AppendBinary(dst []byte) []byte {
	dst = append(dst, version<<4|kindShedder)
	for _, n := range s.InFlight {
		dst = binary.LittleEndian.AppendUint32(dst, n)
	}
	return binary.LittleEndian.AppendUint32(dst, s.Peak)
}

// DecodeState decodes an encoded State. An empty b is the zero State.
func DecodeState(b []byte) (State, error) {
	var s State
	if len(b) == 0 {
		return s, nil
	}
	if err := checkHeader(b, kindShedder, StateSize); err != nil {
		return State{}, err
	}
	for i := range s.InFlight {
		s.InFlight[i] = binary.LittleEndian.Uint32(b[1+4*i:])
	}
	s.Peak = binary.LittleEndian.Uint32(b[1+4*MaxClasses:])
	return s, nil
}

var kindNames = [...]string{kindShedder: "shedder", kindController: "controller", kindHistogram: "histogram"}

// checkHeader verifies the header byte (version 1) and the length of a non-empty encoding.
func checkHeader(b []byte, kind byte, size int) error {
	if err := checkVersion(b, version); err != nil {
		return err
	}
	return checkKind(b, kind, size)
}

func checkVersion(b []byte, want byte) error {
	if v := b[0] >> 4; v != want {
		return fmt.Errorf("%w: version %d, want %d", ErrMalformed, v, want)
	}
	return nil
}

// checkKind verifies the kind in the header byte and the length of a non-empty encoding.
func checkKind(b []byte, kind byte, size int) error {
	if k := b[0] & 0xf; k != kind {
		return fmt.Errorf("%w: kind %d, want %d (%s)", ErrMalformed, k, kind, kindNames[kind])
	}
	if len(b) != size {
		return fmt.Errorf("%w: %s state of %d bytes, want %d", ErrMalformed, kindNames[kind], len(b), size)
	}
	return nil
}
