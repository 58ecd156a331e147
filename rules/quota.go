package rules

import (
	"math/bits"
	"time"

	"github.com/meshlimit/meshlimit/algorithms"
	"github.com/meshlimit/meshlimit/internal/sfv"
)

// appendQuota appends the enabled quota header sets for sorted outcomes.
func (r *Response) appendQuota(dst []Field, buf []byte, outcomes []Outcome) ([]Field, []byte) {
	if len(outcomes) == 0 {
		return dst, buf
	}
	if r.sets&setIETF != 0 {
		dst, buf = appendIETF(dst, buf, outcomes)
	}
	if r.sets&setDraft03 != 0 {
		dst, buf = appendDraft03(dst, buf, outcomes)
	}
	return dst, buf
}

// appendIETF appends RateLimit-Policy and RateLimit (see Response) for sorted outcomes.
func appendIETF(dst []Field, buf []byte, outcomes []Outcome) ([]Field, []byte) {
	if l := outcomes[0].Limit; len(outcomes) == 1 && l.policy != nil && !outcomes[0].Partition.set {
		dst = append(dst, Field{HeaderRateLimitPolicy, l.policy}) // rendered at compile: no copy
	} else {
		start := len(buf)
		for i := range outcomes {
			if i > 0 {
				buf = append(buf, ", "...)
			}
			buf = outcomes[i].Limit.appendPolicy(buf)
			buf = appendPK(buf, &outcomes[i].Partition)
		}
		dst = append(dst, Field{HeaderRateLimitPolicy, buf[start:]})
	}
	start := len(buf)
	for i := range outcomes {
		if i > 0 {
			buf = append(buf, ", "...)
		}
		d := &outcomes[i].Decision
		if l := outcomes[i].Limit; l.policy != nil {
			buf = append(buf, l.policy[:l.sfName]...)
		} else {
			buf = sfv.AppendString(buf, l.Name)
		}
		buf = append(buf, ";r="...)
		buf = sfv.AppendInteger(buf, max(d.Remaining, 0))
		// A concurrency limit has no t: when a permit comes back depends on requests in
		// flight, not on a clock.
		if outcomes[i].Limit.Concurrency == 0 {
			buf = append(buf, ";t="...)
			buf = sfv.AppendInteger(buf, resetSeconds(&outcomes[i]))
		}
		buf = appendPK(buf, &outcomes[i].Partition)
	}
	return append(dst, Field{HeaderRateLimit, buf[start:]}), buf
}

// appendDraft03 appends X-RateLimit-Limit, -Remaining and -Reset (see Response) for sorted
// outcomes.
func appendDraft03(dst []Field, buf []byte, outcomes []Outcome) ([]Field, []byte) {
	start := len(buf)
	buf = sfv.AppendInteger(buf, max(outcomes[0].Limit.Limit.Quota, 0))
	for i := range outcomes {
		l := outcomes[i].Limit
		buf = append(buf, ", "...)
		buf = sfv.AppendInteger(buf, max(l.Limit.Quota, 0))
		buf = append(buf, ";w="...)
		buf = sfv.AppendInteger(buf, windowSeconds(l.Limit.Window))
		buf = append(buf, ";name="...)
		buf = sfv.AppendString(buf, l.Name)
	}
	dst = append(dst, Field{HeaderXRateLimitLimit, buf[start:]})
	start = len(buf)
	buf = sfv.AppendInteger(buf, max(outcomes[0].Decision.Remaining, 0))
	dst = append(dst, Field{HeaderXRateLimitRemaining, buf[start:]})
	start = len(buf)
	buf = sfv.AppendInteger(buf, resetSeconds(&outcomes[0]))
	return append(dst, Field{HeaderXRateLimitReset, buf[start:]}), buf
}

// renderPolicies renders the RateLimit-Policy member of every limit of the configuration once, at
// the end of its compilation (nothing changes a LimitSpec afterwards), for appendQuota to copy.
func (c *Config) renderPolicies() {
	render := func(set *LimitSet) {
		for i := range set.Limits {
			l := &set.Limits[i]
			l.policy = sfv.AppendString(nil, l.Name)
			l.sfName = len(l.policy)
			l.policy = appendPolicyParams(l.policy, l)
		}
	}
	for _, r := range c.rules {
		for i := range r.sets {
			render(&r.sets[i])
		}
		for _, set := range []*LimitSet{r.overflow, r.fallback} {
			if set != nil {
				render(set)
			}
		}
	}
}

// appendPolicy appends the limit's RateLimit-Policy member: the one rendered with its configuration,
// or (for a LimitSpec built by hand) a fresh rendering.
func (l *LimitSpec) appendPolicy(buf []byte) []byte {
	if l.policy != nil {
		return append(buf, l.policy...)
	}
	return appendPolicyParams(sfv.AppendString(buf, l.Name), l)
}

// appendPolicyParams appends the parameters of a RateLimit-Policy member: the quota, the window of a
// rate limit, and always the quota unit (requests, content-bytes or concurrent-requests), although
// the draft makes "requests" the default, so that a client never has to know the default.
func appendPolicyParams(buf []byte, l *LimitSpec) []byte {
	if c := l.Concurrency; c > 0 { // no window: a permit lasts as long as its request
		buf = append(buf, ";q="...)
		buf = sfv.AppendInteger(buf, c)
		return append(buf, `;qu="concurrent-requests"`...)
	}
	buf = append(buf, ";q="...)
	buf = sfv.AppendInteger(buf, max(l.Limit.Quota, 0))
	buf = append(buf, ";w="...)
	buf = sfv.AppendInteger(buf, windowSeconds(l.Limit.Window))
	if l.ContentBytes {
		return append(buf, `;qu="content-bytes"`...)
	}
	return append(buf, `;qu="requests"`...)
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

// resetSeconds is the t parameter of an outcome (see Response).
func resetSeconds(o *Outcome) int64 {
	d := &o.Decision
	if !d.Allowed && d.RetryAfter != algorithms.RetryNever {
		return retrySeconds(d)
	}
	return ceilSeconds(untilMoreQuota(&o.Limit.Limit, d))
}

// untilMoreQuota is the time until the remaining quota of l, as d reports it, grows: 0 when nothing
// is used. For the buckets, with m units missing, the bucket is full after d.Reset and each unit takes
// Window/Quota, so the first of them is back after d.Reset − (m−1)×Window/Quota. For the fixed window
// every unit comes back at the window's end (d.Reset). The sliding algorithms' decisions carry only
// d.Reset, an upper bound.
func untilMoreQuota(l *algorithms.Limit, d *algorithms.Decision) time.Duration {
	c := l.Capacity()
	if d.Reset <= 0 || d.Remaining >= c {
		return 0
	}
	if l.Kind != algorithms.TokenBucket && l.Kind != algorithms.LeakyBucket || l.Quota <= 0 || l.Window <= 0 {
		return d.Reset
	}
	m := c - max(d.Remaining, 0) // 1 <= m <= c
	hi, lo := bits.Mul64(uint64(m-1), uint64(l.Window))
	if hi >= uint64(l.Quota) {
		return d.Reset // cannot happen for a valid limit: (m−1)×Window/Quota < Capacity×Window/Quota
	}
	refill, _ := bits.Div64(hi, lo, uint64(l.Quota))
	if refill >= uint64(d.Reset) {
		return time.Nanosecond // d.Reset is rounded up to a microsecond: the unit is due at once
	}
	return d.Reset - time.Duration(refill)
}
