package rules

import (
	"time"

	"github.com/meshlimit/meshlimit/internal/sfv"
)

// renderPolicies renders what the quota fields write of every limit of the configuration whatever
// the decision, once, at the end of its compilation (nothing changes a LimitSpec afterwards), in
// the configuration's structured dialect: each limit's policy member and the start of its RateLimit
// member, each also after the ", " that separates members, each set's whole policy field in
// configuration order, and each limit's X-RateLimit-Limit member (draft03). appendStructured copies them: one copy per member, none for a policy field
// whose outcomes are one set's limits in order.
func (c *Config) renderPolicies() {
	d := c.Response.structured()
	for _, r := range c.rules {
		for i := range r.sets {
			renderSet(r.sets[i].Limits, d)
		}
		for _, set := range []*LimitSet{r.overflow, r.fallback} {
			if set != nil {
				renderSet(set.Limits, d)
			}
		}
	}
}

// renderSet renders the limits of one set in dialect d (see renderPolicies).
func renderSet(limits []LimitSpec, d *dialect) {
	if len(limits) > 0 && limits[0].policyOf == d {
		return // a list that overrides share (compile_overrides.go), rendered already
	}
	var field []byte
	whole := len(limits) > 0
	for i := range limits {
		l := &limits[i]
		l.policyOf = d
		l.headNext = sfv.AppendString([]byte(", "), l.Name)
		l.sfName = len(l.headNext) - 2
		l.headNext = appendParam(l.headNext, d.available)
		if l.Limit.Calendar.Unit != 0 {
			whole = false // its w is the length of the period at hand: rendered with each outcome
			continue
		}
		l.draft03Next = appendDraft03Member(nil, l, 0)
		l.policyNext = appendPolicyParams(append([]byte(", "), l.headNext[2:2+l.sfName]...), l, d, 0)
		l.policy = l.policyNext[2:]
		if i > 0 {
			field = append(field, ", "...)
		}
		field = append(field, l.policy...)
	}
	if whole {
		limits[0].set, limits[0].setPolicy = limits, field
	}
}

// setPolicy returns the policy field of outcomes rendered with their configuration, or nil when
// it is not one: when they are not one set's limits in configuration order (the most restrictive
// first is also the first configured), or carry a partition key.
func setPolicy(outcomes []Outcome, d *dialect) []byte {
	l := outcomes[0].Limit
	if l.setPolicy == nil || l.policyOf != d || len(outcomes) != len(l.set) {
		return nil
	}
	for i := range outcomes {
		if outcomes[i].Limit != &l.set[i] || outcomes[i].Partition.set {
			return nil
		}
	}
	return l.setPolicy
}

// appendLimitMembers appends the service-limit members of outcomes in dialect d (appendLimit's
// members, one after the other, each with its partition parameter), in one pass: a member whose
// head was rendered with the configuration in d and that carries no cost parameter is written by
// one sfv.AppendMember (its head, r, t and partition parameter, with one check of buf's room); the
// others by appendLimit.
func appendLimitMembers(buf []byte, d *dialect, outcomes []Outcome, jitter int64) []byte {
	var pk partitionParam
	for i := range outcomes {
		o := &outcomes[i]
		l := o.Limit
		var tail []byte
		one := l.policyOf == d && (d.cost == "" || o.Cost <= 0)
		if one && o.Partition.set && d.partition != "" {
			tail, one = pk.encoded(d, &o.Partition)
		}
		if !one {
			buf = d.appendLimit(buf, o, jitter, i > 0)
			if o.Partition.set {
				buf = pk.append(buf, d, &o.Partition)
			}
			continue
		}
		head := l.headNext
		if i == 0 {
			head = head[2:]
		}
		param, t := d.effective, int64(0)
		switch {
		case param == "" || l.Concurrency > 0: // a concurrency limit has no effective window (see appendLimit)
			param = ""
		case o.Decision.EffectiveWindow > 0: // effectiveSeconds, without its call
			t = min(max(ceilSecondsOf(o.Decision.EffectiveWindow), 1)+jitter, sfv.MaxInteger)
		default:
			t = effectiveSeconds(o, jitter)
		}
		buf = sfv.AppendMember(buf, head, max(o.Decision.Remaining, 0), param, t, tail)
	}
	return buf
}

// ceilSecondsOf is ceilSeconds for d > 0, from a float64 division corrected by the exact remainder
// (the estimate is within 2 of the quotient): Go divides an int64 by a constant with a 128-bit
// product by its reciprocal, a long software sequence on wasm, and this runs once per limit of
// every response.
func ceilSecondsOf(d time.Duration) int64 {
	s := int64(float64(d) / float64(time.Second))
	for s > 0 && time.Duration(s)*time.Second > d {
		s--
	}
	for d-time.Duration(s)*time.Second >= time.Second {
		s++
	}
	if time.Duration(s)*time.Second < d {
		s++
	}
	return min(s, sfv.MaxInteger)
}
