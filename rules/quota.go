package rules

import (
	"time"

	"github.com/meshlimit/meshlimit/algorithms"
	"github.com/meshlimit/meshlimit/internal/sfv"
)

// appendQuota appends the fields of the enabled dialects for sorted outcomes, with jitter whole seconds
// added to every t.
func (r *Response) appendQuota(dst []Field, buf []byte, outcomes []Outcome, jitter int64) ([]Field, []byte) {
	if len(outcomes) == 0 {
		return dst, buf
	}
	for _, d := range r.dialects {
		dst, buf = d.render(d, dst, buf, outcomes, jitter)
	}
	return dst, buf
}

// appendDraft03 appends X-RateLimit-Limit, -Remaining and -Reset (see Response) for sorted
// outcomes.
func appendDraft03(_ *dialect, dst []Field, buf []byte, outcomes []Outcome, jitter int64) ([]Field, []byte) {
	start := len(buf)
	buf = sfv.AppendInteger(buf, max(outcomes[0].Limit.Limit.Quota, 0))
	for i := range outcomes {
		l := outcomes[i].Limit
		if l.draft03Next != nil { // rendered with the configuration
			buf = append(buf, l.draft03Next...)
			continue
		}
		buf = appendDraft03Member(buf, l, outcomes[i].Period)
	}
	dst = append(dst, Field{HeaderXRateLimitLimit, buf[start:]})
	start = len(buf)
	buf = sfv.AppendInteger(buf, max(outcomes[0].Decision.Remaining, 0))
	dst = append(dst, Field{HeaderXRateLimitRemaining, buf[start:]})
	start = len(buf)
	buf = sfv.AppendInteger(buf, effectiveSeconds(&outcomes[0], jitter))
	return append(dst, Field{HeaderXRateLimitReset, buf[start:]}), buf
}

// appendDraft03Member appends ", " and the X-RateLimit-Limit member of limit l for an outcome in a
// calendar period of length period.
func appendDraft03Member(buf []byte, l *LimitSpec, period time.Duration) []byte {
	buf = append(buf, ", "...)
	buf = sfv.AppendInteger(buf, max(l.Limit.Quota, 0))
	buf = append(buf, ";w="...)
	buf = sfv.AppendInteger(buf, periodSeconds(l, period))
	buf = append(buf, ";name="...)
	return sfv.AppendString(buf, l.Name)
}

// sortOutcomes orders outcomes most restrictive first (see Response). It is an
// insertion sort: stable, allocation-free, and the lists are short. A single outcome (the
// common case) costs no call.
func sortOutcomes(o []Outcome) {
	if len(o) > 1 {
		insertionSort(o)
	}
}

func insertionSort(o []Outcome) {
	for i := 1; i < len(o); i++ {
		for j := i; j > 0 && moreRestrictive(&o[j], &o[j-1]); j-- {
			o[j], o[j-1] = o[j-1], o[j]
		}
	}
}

func moreRestrictive(a, b *Outcome) bool {
	da, db := &a.Decision, &b.Decision
	if da.Allowed != db.Allowed {
		return !da.Allowed
	}
	if !da.Allowed {
		return da.RetryAfter > db.RetryAfter
	}
	if da.Remaining != db.Remaining {
		return da.Remaining < db.Remaining
	}
	return da.Reset > db.Reset
}

// ceilSeconds returns d in whole seconds, rounded up, clamped to [0, sfv.MaxInteger].
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	s := int64(d / time.Second)
	if d%time.Second != 0 {
		s++
	}
	return min(s, sfv.MaxInteger)
}

func windowSeconds(w time.Duration) int64 { return max(ceilSeconds(w), 1) }

// retrySeconds is the wait a denied decision reports: RetryAfter rounded up, at least 1.
func retrySeconds(d *algorithms.Decision) int64 { return max(ceilSeconds(d.RetryAfter), 1) }

// effectiveSeconds is the t parameter of an outcome (see Response): its effective window in whole
// seconds, rounded up and at least 1 (a decision that does not tell its window is not one with
// none), plus jitter.
func effectiveSeconds(o *Outcome, jitter int64) int64 {
	w := o.Decision.EffectiveWindow // what EffectiveWindowOf returns when it is set, without its copies
	if w <= 0 {
		w = o.Limit.Limit.EffectiveWindowOf(o.Decision)
	}
	return min(max(ceilSeconds(w), 1)+jitter, sfv.MaxInteger)
}
