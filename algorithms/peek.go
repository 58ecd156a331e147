package algorithms

import (
	"fmt"
	"time"
)

// Peek reports what the encoded state holds at now (unix nanoseconds) without deciding a request:
// the Decision is Allowed, with Remaining the cost available at now and Reset the time until the full
// Capacity is back (0 exactly when Remaining == Capacity); RetryAfter and Delay are 0. It is what a
// caller reports for a limit that would have admitted a request that another limit denied: nothing
// was consumed, so the limit is reported as it is. It reads the state only, allocates nothing, and
// treats now as Decide does (truncated to microseconds; a now before the state's clock is that clock).
//
// err is non-nil only for an invalid Limit or malformed state bytes (wrapping ErrMalformedState).
func (l Limit) Peek(state []byte, now int64) (Decision, error) {
	g, err := l.check()
	if err != nil {
		return Decision{}, err
	}
	return l.peek(&g, state, now)
}

// peek is Peek for a valid l whose bucket constants are g.
func (l Limit) peek(g *gcraParams, state []byte, now int64) (Decision, error) {
	n := quantize(now)
	var err error
	var d Decision
	var buf [slidingSize]byte // the largest fixed-size encoding; the decide functions write into it
	switch l.Kind {
	case TokenBucket, LeakyBucket:
		_, d, err = l.decideBucket(g, state, n, 0, buf[:0])
	case FixedWindow:
		_, d, err = l.decideFixed(state, n, 0, buf[:0])
	case SlidingWindow:
		_, d, err = l.decideSliding(state, n, 0, buf[:0])
	default:
		d, err = l.peekLog(state, n)
	}
	if err != nil {
		return Decision{}, err
	}
	d.Allowed, d.RetryAfter, d.Delay = true, 0, 0
	d.Remaining = min(d.Remaining, l.Capacity())
	return d, nil
}

// peekLog is Peek for the sliding log, whose decide function would copy the log.
func (l Limit) peekLog(state []byte, n int64) (Decision, error) {
	d := Decision{Limit: l.Quota, Remaining: l.Quota, EffectiveWindow: l.Window}
	if len(state) == 0 {
		return d, nil // spending the whole quota now, the first unit is back after Window
	}
	s, err := decodeLog(state)
	if err != nil {
		return Decision{}, fmt.Errorf("peek: %w", err)
	}
	w := l.windowUs()
	eff := max(n, s.clock)
	first := s.firstLive(eff - w)
	count := int64(s.len() - first)
	d.Remaining = max(l.Quota-count, 0)
	if count > 0 {
		d.Reset = time.Duration(usToDuration(s.newest() + w - n))
	}
	d.EffectiveWindow = s.effectiveWindow(first, count, l.Quota, w, eff, n)
	return d, nil
}
