package shed

import (
	"errors"
	"fmt"
)

// MaxClasses is the most priority classes a Policy may have.
const MaxClasses = 8

// MaxCapacity is the largest capacity (in-flight requests) the shedder and the controller work
// with; larger values are clamped to it.
const MaxCapacity = 1_000_000

// Class is one priority class of a Policy.
type Class struct {
	// Name identifies the class in configuration and metrics: 1 to 32 bytes of [a-z0-9_-].
	Name string
	// Reserve is the share of capacity, in thousandths, that this class keeps from every class
	// below it: those may never use it. It must be 0 for the lowest class, and the Reserves
	// of a Policy must add up to less than 1000.
	Reserve int
}

// Policy is an ordered list of priority classes, highest first, with their reserves and the
// class of requests that name none. It is a plain value (no pointers into the caller's data);
// its methods never read the clock, never allocate, and are safe for concurrent use.
//
// The zero Policy has no classes and sheds every request.
type Policy struct {
	names    [MaxClasses]string
	held     [MaxClasses]int64 // held[i]: thousandths of capacity that class i may never use
	n        int
	def      int
	keyShare int64 // thousandths of capacity one key may hold (KeySlots); 0 stands for 1000
}

// DefaultPolicy returns the three classes of docs/shedding.md: critical (keeps 10% of capacity
// from the others), default (keeps a further 20% from sheddable) and sheddable, with default
// as the default class. Sheddable is shed from 70% occupancy, default from 90%, critical only
// at capacity.
func DefaultPolicy() Policy {
	p, err := NewPolicy([]Class{{"critical", 100}, {"default", 200}, {"sheddable", 0}}, "default")
	if err != nil {
		panic(err) // unreachable: the literal above is valid
	}
	return p
}

// ErrPolicy is wrapped by every error of NewPolicy.
var ErrPolicy = errors.New("shed: invalid policy")

// NewPolicy validates classes (highest priority first) and returns their Policy, with
// defaultClass the class of a request that names none or an unknown one. Errors wrap ErrPolicy
// and name the offending field, e.g. "classes[2].reserve".
func NewPolicy(classes []Class, defaultClass string) (Policy, error) {
	var p Policy
	if len(classes) < 1 || len(classes) > MaxClasses {
		return Policy{}, fmt.Errorf("%w: classes: want 1 to %d classes, got %d", ErrPolicy, MaxClasses, len(classes))
	}
	sum := int64(0)
	for i, c := range classes {
		if err := checkName(c.Name); err != nil {
			return Policy{}, fmt.Errorf("%w: classes[%d].name: %v", ErrPolicy, i, err)
		}
		if j := p.index(c.Name); j >= 0 {
			return Policy{}, fmt.Errorf("%w: classes[%d].name: %q repeats classes[%d]", ErrPolicy, i, c.Name, j)
		}
		if c.Reserve < 0 || c.Reserve > 999 {
			return Policy{}, fmt.Errorf("%w: classes[%d].reserve: want 0 to 999 thousandths, got %d", ErrPolicy, i, c.Reserve)
		}
		if i == len(classes)-1 && c.Reserve != 0 {
			return Policy{}, fmt.Errorf("%w: classes[%d].reserve: the lowest class has no class below it to keep capacity from; want 0, got %d", ErrPolicy, i, c.Reserve)
		}
		p.names[i], p.held[i] = c.Name, sum
		p.n++
		sum += int64(c.Reserve)
	}
	if sum >= 1000 {
		return Policy{}, fmt.Errorf("%w: classes: reserves add up to %d thousandths; want less than 1000, so the lowest class can be admitted", ErrPolicy, sum)
	}
	if p.def = p.index(defaultClass); p.def < 0 {
		return Policy{}, fmt.Errorf("%w: default_class: %q is not one of the classes", ErrPolicy, defaultClass)
	}
	return p, nil
}

func checkName(s string) error {
	if len(s) < 1 || len(s) > 32 {
		return fmt.Errorf("want 1 to 32 bytes, got %d", len(s))
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return fmt.Errorf("%q: want only a-z, 0-9, '_' and '-'", s)
		}
	}
	return nil
}

func (p *Policy) index(name string) int {
	for i := range p.n {
		if p.names[i] == name {
			return i
		}
	}
	return -1
}

// Classes returns the number of classes; class indexes run from 0 (highest) to Classes()-1.
func (p *Policy) Classes() int { return p.n }

// Name returns the name of class i, or "" if i is out of range.
func (p *Policy) Name(i int) string {
	if i < 0 || i >= p.n {
		return ""
	}
	return p.names[i]
}

// Default returns the index of the default class.
func (p *Policy) Default() int { return p.def }

// Class returns the index of the class named name, or the default class's if there is none
// (an empty or unknown name). It does not allocate.
func (p *Policy) Class(name string) int {
	if i := p.index(name); i >= 0 {
		return i
	}
	return p.def
}

// Threshold returns the occupancy at which class stops being admitted under the given
// capacity: capacity − ceil(capacity × held/1000), where held is the sum of the Reserves of
// the classes above it. It is capacity for the highest class and never increases down the
// list. capacity is clamped to [0, MaxCapacity]; a class out of range is the lowest class.
func (p *Policy) Threshold(capacity int64, class int) int64 {
	if p.n == 0 {
		return 0
	}
	c := min(max(capacity, 0), MaxCapacity)
	if class < 0 || class >= p.n {
		class = p.n - 1
	}
	return c - (c*p.held[class]+999)/1000
}

// WithKeyShare returns p with one key (a client, a connection: whatever the caller counts by)
// held to share thousandths of the capacity (1 to 1000; 1000, the default, is no cap): see
// KeySlots and AdmitKey. Errors wrap ErrPolicy and name key_share.
func (p Policy) WithKeyShare(share int) (Policy, error) {
	if share < 1 || share > 1000 {
		return p, fmt.Errorf("%w: key_share: want 1 to 1000 thousandths, got %d", ErrPolicy, share)
	}
	p.keyShare = int64(share)
	return p, nil
}

// KeyShare returns the thousandths of the capacity that one key may hold (1000: no cap).
func (p *Policy) KeyShare() int {
	if p.keyShare == 0 {
		return 1000
	}
	return int(p.keyShare)
}

// KeySlots returns the most slots one key may hold at the given capacity (clamped to [0,
// MaxCapacity]): ceil(capacity × KeyShare/1000), and at least 1, so that every key can make
// progress. The caller counts each key's slots (the requests of that key it admitted and has
// not released) and passes the count to AdmitKey.
func (p *Policy) KeySlots(capacity int64) int64 {
	c := min(max(capacity, 0), MaxCapacity)
	return max((c*int64(p.KeyShare())+999)/1000, 1)
}
