package algorithms

import (
	"encoding/binary"
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

// tokens returns floor(s/t), the whole cost units that fit in the non-negative span s
// (s.i <= maxWindowUs): floor((s.i×Q + s.f)/W).
func (g *gcraParams) tokens(s rat) int64 {
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
		switch {
		case i > uint64(maxTimeUs+maxWindowUs) || f > uint64(MaxQuota-1): // out of range: the checks below say how
		case int64(f) >= g.q:
			return rat{int64(i) + 1, 0}, nil
		default:
			return rat{int64(i), int64(f)}, nil
		}
	}
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
	now := rat{n, 0}
	tat := now
	if len(state) > 0 {
		var err error
		if tat, err = g.decode(state, l.Kind); err != nil {
			return nil, Decision{}, err
		}
		if tat.less(now) {
			tat = now // a full bucket: the same state, with now recorded
		}
	}
	limit := g.add(now, g.tau) // the latest TAT that conforms
	d := Decision{Limit: l.Quota}
	if cost > g.c {
		d.RetryAfter = RetryNever
	} else if next := g.add(tat, g.times(cost)); !limit.less(next) {
		d.Allowed = true
		if l.Kind == LeakyBucket {
			d.Delay = time.Duration(usToDuration(g.sub(tat, now).ceil()))
		}
		tat = next
	} else {
		d.RetryAfter = time.Duration(usToDuration(g.sub(next, limit).ceil()))
	}
	if !limit.less(tat) {
		d.Remaining = g.tokens(g.sub(limit, tat))
	}
	d.Reset = time.Duration(usToDuration(g.sub(tat, now).ceil()))
	d.EffectiveWindow = g.effectiveWindow(tat, d.Remaining, n)

	dst = append(dst[:0], header(l.Kind))
	dst = appendField(dst, tat.i)
	dst = appendField(dst, tat.f)
	return dst, d, nil
}

func (l Limit) idleBucket(g *gcraParams, state []byte, n int64) bool {
	tat, err := g.decode(state, l.Kind)
	return err != nil || !(rat{n, 0}).less(tat)
}
