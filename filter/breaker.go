package filter

// breaker is a consecutive-failure circuit breaker. It belongs to one VM (one worker thread): Envoy
// gives each thread its own, so one thread's probe does not depend on another's.
type breaker struct {
	threshold int
	cooldown  int64
	failures  int
	openUntil int64
	probing   bool
}

// allow reports whether a call may be made at now: always while closed; after the cooldown, one
// probe at a time.
func (b *breaker) allow(now int64) bool {
	if b.failures < b.threshold {
		return true
	}
	if now < b.openUntil || b.probing {
		return false
	}
	b.probing = true
	return true
}

func (b *breaker) success() { b.failures, b.probing = 0, false }

// failure records a failed call and reports whether it opened the breaker.
func (b *breaker) failure(now int64) (opened bool) {
	wasProbe := b.probing
	b.probing = false
	b.failures++
	if b.failures >= b.threshold {
		b.openUntil = now + b.cooldown
		return b.failures == b.threshold || wasProbe
	}
	return false
}

// open reports whether the breaker is open: calls that do not probe it (renewals and releases of
// permits, settles) are not sent then.
func (b *breaker) open() bool { return b.failures >= b.threshold }
