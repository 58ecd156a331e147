package algorithms

import (
	"encoding/binary"
	"math"
	"math/bits"
	"slices"
	"time"
)

// The token bucket and the leaky bucket share one implementation: GCRA, the generic cell rate
// algorithm. The state is the theoretical arrival time (TAT): the instant at which the bucket
// would be full (token bucket) or the queue empty (leaky bucket). A request of cost c costs
// c×T, with T = Window/Quota the emission interval, and conforms when max(TAT, now) + c×T
// does not pass now + τ, with τ = Capacity×T. This admits exactly what a continuously
// refilled token bucket of Capacity tokens admits, and what a queue of Capacity units that
// drains at Quota per Window accepts; the two kinds differ only in Decision.Delay.
//
// Times are exact rationals with denominator Quota: i + f/Quota µs with 0 <= f < Quota.

// rat is i + f/q microseconds for the q of the gcraParams it is used with; 0 <= f < q.
type rat struct{ i, f int64 }

// gcraParams are the constants of one bucket limit.
type gcraParams struct {
	q, w int64 // Quota; Window in µs
	c    int64 // Capacity
	t    rat   // emission interval Window/Quota
	tau  rat   // Capacity × t, the tolerance
	// prepared is set by Limit.Prepare: times and tokens then divide with mulAddDiv, in 64-bit
	// arithmetic, instead of mulDivMod's 128-bit one (a software loop on wasm). A Limit's own
	// methods leave it false: they are the reference the prepared form is tested against.
	prepared bool
	// cFit and iFit, set by Limit.Prepare (0 otherwise), bound where times and tokens multiply
	// exactly in 64 bits with one division: c×t.f fits for c <= cFit, s.i×Q + s.f for s.i <= iFit.
	cFit, iFit int64
}

// fit sets cFit and iFit (see gcraParams).
func (g *gcraParams) fit() {
	g.cFit = math.MaxInt64
	if g.t.f > 0 {
		g.cFit = math.MaxInt64 / g.t.f
	}
	g.iFit = (math.MaxInt64 - g.q) / g.q
}

// gcra returns the constants of l, a bucket with a valid Quota and Window. ok is false if τ
// would exceed MaxWindow.
func (l Limit) gcra() (g gcraParams, ok bool) {
	g.q, g.w, g.c = l.Quota, int64(l.Window/time.Microsecond), l.Capacity()
	g.t = rat{g.w / g.q, g.w % g.q}
	if g.t.i > 0 && g.c > maxWindowUs/g.t.i {
		return g, false
	}
	g.tau = g.times(g.c)
	return g, !(rat{maxWindowUs, 0}).less(g.tau)
}

// times returns c×t. It requires c×t.i <= 2×maxWindowUs (true for c <= 2×Capacity).
func (g *gcraParams) times(c int64) rat {
	if c <= g.cFit { // c×t.f fits: one division, no float
		p := uint64(c) * uint64(g.t.f)
		q := p / uint64(g.q)
		return rat{c*g.t.i + int64(q), int64(p - q*uint64(g.q))}
	}
	return g.timesWide(c)
}

// timesWide is times for a product c×t.f that may not fit in 64 bits.
func (g *gcraParams) timesWide(c int64) rat {
	if g.prepared && c <= g.c+1 { // the quotient is below c
		q, r := mulAddDiv(c, g.t.f, 0, g.q)
		return rat{c*g.t.i + q, r}
	}
	q, r := mulDivMod(c, g.t.f, g.q) // c×Tr/Q < c: exact in doubles
	return rat{c*g.t.i + q, r}
}

// timesTau returns k×τ for 0 <= k <= MaxDebt+1 (k×τ.i < 2^52, k×τ.f < 2^47).
func (g *gcraParams) timesTau(k int64) rat {
	f := g.tau.f * k
	return rat{g.tau.i*k + f/g.q, f % g.q}
}

func (g *gcraParams) add(a, b rat) rat {
	s := rat{a.i + b.i, a.f + b.f}
	if s.f >= g.q {
		s.i, s.f = s.i+1, s.f-g.q
	}
	return s
}

func (g *gcraParams) sub(a, b rat) rat {
	s := rat{a.i - b.i, a.f - b.f}
	if s.f < 0 {
		s.i, s.f = s.i-1, s.f+g.q
	}
	return s
}

// tokensWide returns floor(s/t), the whole cost units that fit in the non-negative span s
// (s.i <= maxWindowUs): floor((s.i×Q + s.f)/W), for a product s.i×Q that may not fit in 64 bits
// (stepBucket divides the others in line).
func (g *gcraParams) tokensWide(s rat) int64 {
	if g.prepared && s.i <= g.tau.i { // the quotient is at most Capacity
		q, _ := mulAddDiv(s.i, g.q, s.f, g.w)
		return q
	}
	q, r := mulDivMod(s.i, g.q, g.w)
	return q + (r+s.f)/g.w
}

func (a rat) less(b rat) bool { return a.i < b.i || (a.i == b.i && a.f < b.f) }

// ceil rounds a non-negative span up to whole microseconds.
func (a rat) ceil() int64 {
	if a.f > 0 {
		return a.i + 1
	}
	return a.i
}

const bucketSize = 1 + 8 + 8

// decode decodes a non-empty bucket state: header, TAT µs, TAT fraction (numerator over
// Quota). A fraction >= Quota, left by a limit with a larger Quota, rounds the TAT up.
func (g *gcraParams) decode(b []byte, k Kind) (rat, error) {
	if len(b) == bucketSize && b[0] == header(k) { // a well-formed state: no call on the way
		i, f := binary.BigEndian.Uint64(b[1:]), binary.BigEndian.Uint64(b[9:])
		if i <= uint64(maxTimeUs+maxWindowUs) && f < uint64(g.q) {
			return rat{int64(i), int64(f)}, nil
		}
	}
	return g.decodeSlow(b, k)
}

// decodeSlow is decode for a state that is not well-formed under this Quota: a fraction >= Quota,
// or out of range (the checks say how), or not a bucket state of kind k.
func (g *gcraParams) decodeSlow(b []byte, k Kind) (rat, error) {
	if err := checkHeader(b, k, len(b) == bucketSize, "17"); err != nil {
		return rat{}, err
	}
	i, err := field(b, 1, maxTimeUs+maxWindowUs, "TAT", k)
	if err != nil {
		return rat{}, err
	}
	f, err := field(b, 9, MaxQuota-1, "TAT fraction", k)
	if err != nil {
		return rat{}, err
	}
	if f >= g.q {
		return rat{i + 1, 0}, nil
	}
	return rat{i, f}, nil
}

func (l *Limit) decideBucket(g *gcraParams, state []byte, n, cost int64, dst []byte) ([]byte, Decision, error) {
	var d Decision
	out := slices.Grow(dst[:0], bucketSize)[:bucketSize] // nothing written yet: dst may be state
	if err := l.stepBucket(g, state, out, n, cost, &d); err != nil {
		return nil, Decision{}, err
	}
	return out, d, nil
}

// stepBucket is decideBucket with the next state written to out (bucketSize bytes, which may be
// state itself: the state is read before anything is written) and the decision to d. Nothing is
// written when the state does not decode. The common cases of decode, times and tokens are written
// out in line (Go inlines none of them, and a call costs more than the arithmetic on wasm); the
// others call them.
func (l *Limit) stepBucket(g *gcraParams, state, out []byte, n, cost int64, d *Decision) error {
	now := rat{n, 0}
	tat, slow := now, false
	if len(state) == bucketSize && state[0] == header(l.Kind) {
		// Big-endian fields read as one load each: binary.BigEndian's bytes one by one cost five
		// times more on wasm (natively both are one load and a byte swap).
		i, f := bits.ReverseBytes64(binary.LittleEndian.Uint64(state[1:])), bits.ReverseBytes64(binary.LittleEndian.Uint64(state[9:]))
		tat = rat{int64(i), int64(f)}
		if i > uint64(maxTimeUs+maxWindowUs) || f >= uint64(g.q) {
			slow = true // out of range, or a fraction of a larger Quota: decodeSlow says what it is
		}
	} else if len(state) > 0 {
		slow = true
	}
	if slow {
		var err error
		if tat, err = g.decodeSlow(state, l.Kind); err != nil {
			return err
		}
	}
	if tat.less(now) {
		tat = now // a full bucket: the same state, with now recorded
	}
	limit := g.add(now, g.tau) // the latest TAT that conforms
	*d = Decision{Limit: l.Quota}
	ct := rat{} // cost×T: times, in line
	if cost <= g.cFit {
		p := uint64(cost) * uint64(g.t.f)
		q := p / uint64(g.q)
		ct = rat{cost*g.t.i + int64(q), int64(p - q*uint64(g.q))}
	} else if cost <= g.c {
		ct = g.timesWide(cost)
	}
	if cost > g.c {
		d.RetryAfter = RetryNever
	} else if next := g.add(tat, ct); !limit.less(next) {
		d.Allowed = true
		if l.Kind == LeakyBucket {
			d.Delay = time.Duration(usToDuration(g.sub(tat, now).ceil()))
		}
		tat = next
	} else {
		d.RetryAfter = time.Duration(usToDuration(g.sub(next, limit).ceil()))
	}
	d.Reset = time.Duration(usToDuration(g.sub(tat, now).ceil()))
	// Remaining is tokens(limit − tat); the effective window is when one unit past Remaining
	// conforms, once tat + (Remaining+1)×T <= now + τ (doc.go). With the span S = limit − tat in
	// units of 1/Q µs (T is W of them) both come from one division: Remaining = S / W, and the
	// window is W − S mod W units, rounded up to a µs.
	if s := g.sub(limit, tat); !limit.less(tat) && s.i <= g.iFit {
		span := uint64(s.i)*uint64(g.q) + uint64(s.f)
		r := span / uint64(g.w)
		ew := uint64(g.w) - (span - r*uint64(g.w)) // in (0, W]
		d.Remaining = int64(r)
		d.EffectiveWindow = time.Duration(usToDuration(int64((ew + uint64(g.q) - 1) / uint64(g.q))))
	} else {
		if !limit.less(tat) {
			d.Remaining = g.tokensWide(s)
		}
		r1 := d.Remaining + 1
		if r1 <= g.cFit {
			p := uint64(r1) * uint64(g.t.f)
			q := p / uint64(g.q)
			ct = rat{r1*g.t.i + int64(q), int64(p - q*uint64(g.q))}
		} else {
			ct = g.timesWide(r1)
		}
		d.EffectiveWindow = time.Duration(usToDuration(g.sub(g.add(tat, ct), limit).ceil()))
	}
	_ = out[bucketSize-1] // the encoding: header, TAT µs, TAT fraction
	out[0] = header(l.Kind)
	binary.LittleEndian.PutUint64(out[1:], bits.ReverseBytes64(uint64(tat.i))) // binary.BigEndian's bytes, one store each
	binary.LittleEndian.PutUint64(out[9:], bits.ReverseBytes64(uint64(tat.f)))
	return nil
}

func (l Limit) idleBucket(g *gcraParams, state []byte, n int64) bool {
	tat, err := g.decode(state, l.Kind)
	return err != nil || !(rat{n, 0}).less(tat)
}
