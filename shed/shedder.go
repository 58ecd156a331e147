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
	// stream ends. A shed request holds nothing.
	Admitted bool
	// Class is the class the request was decided in (the lowest for an out-of-range index).
	Class int
	// InFlight is the total in flight before the decision.
	InFlight int64
	// Threshold is the class's Threshold at the capacity of the decision: the request was
	// admitted exactly when InFlight < Threshold.
	Threshold int64
}

// Admit decides a request of class (an index from Class) at the given capacity (in-flight
// requests; clamped to [0, MaxCapacity]) against s. It returns s with the request counted in
// its class when admitted, and s unchanged when shed. A class out of range is decided as the
// lowest class. Admit does not allocate.
//
// The request is admitted exactly when s.Total() < p.Threshold(capacity, class). Hence, for a
// fixed capacity C:
//   - total in flight never exceeds C (every threshold is at most C);
//   - at the same occupancy, a class is never shed while a lower class is admitted
//     (thresholds never increase down the list);
//   - the classes below class i never hold more than Threshold(C, i+1) requests together, so
//     class i is admitted whenever the classes from the highest down to i hold fewer than
//     Threshold(C, i) − Threshold(C, i+1) (its reserve); for the highest class that is
//     ceil(C × Reserve/1000), at least one slot when its Reserve is positive.
//
// When the capacity drops, nothing in flight is revoked: the total may exceed the new capacity
// until requests end, and no class is admitted meanwhile above its new threshold.
func (p *Policy) Admit(s State, capacity int64, class int) (State, Decision) {
	if class < 0 || class >= p.n {
		class = max(p.n-1, 0)
	}
	d := Decision{Class: class, InFlight: s.Total(), Threshold: p.Threshold(capacity, class)}
	if d.InFlight < d.Threshold { // so the counts stay below MaxCapacity: no overflow
		d.Admitted = true
		s.InFlight[class]++
		if n := d.InFlight + 1; n > int64(s.Peak) {
			s.Peak = uint32(n)
		}
	}
	return s, d
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

// checkHeader verifies the header byte and the length of a non-empty encoding.
func checkHeader(b []byte, kind byte, size int) error {
	if v := b[0] >> 4; v != version {
		return fmt.Errorf("%w: version %d, want %d", ErrMalformed, v, version)
	}
	if k := b[0] & 0xf; k != kind {
		return fmt.Errorf("%w: kind %d, want %d (%s)", ErrMalformed, k, kind, kindNames[kind])
	}
	if len(b) != size {
		return fmt.Errorf("%w: %s state of %d bytes, want %d", ErrMalformed, kindNames[kind], len(b), size)
	}
	return nil
}
