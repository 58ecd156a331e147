package rules

import (
	"strings"
	"time"

	"github.com/meshlimit/meshlimit/internal/sfv"
)

// dialect is one quota header set, a value of response.rate_limit_headers: the fields it writes and,
// for a structured dialect (appendStructured), the names of their parameters. A later edition of the
// draft that renames parameters, or adds the cost parameter, is one more entry of dialects; one that
// adds a field needs a renderer for it too.
type dialect struct {
	// name selects it in response.rate_limit_headers.
	name string
	// fields are the lower-case names of the fields it writes; no two enabled dialects may share
	// one. A structured dialect writes its policy field first, then its service-limit field.
	fields []string
	// render appends the dialect's fields for outcomes sorted most restrictive first, with jitter
	// whole seconds added to every t (see Response.AppendAllowed).
	render func(d *dialect, dst []Field, buf []byte, outcomes []Outcome, jitter int64) ([]Field, []byte)
	// The parameter names of a structured dialect: quota, unit, window and partition of a policy
	// member; available (quota), effective (window), cost and partition of a service-limit member.
	// An empty name writes no parameter.
	quota, unit, window, partition string
	available, effective, cost     string
}

// dialects are the quota header sets, in the order their fields are written.
var dialects = []*dialect{
	{ // draft-ietf-httpapi-ratelimit-headers-11 (the same names as -10)
		name: "ietf", fields: []string{HeaderRateLimitPolicy, HeaderRateLimit}, render: appendStructured,
		quota: "q", unit: "qu", window: "w", partition: "pk", available: "r", effective: "t",
	},
	{ // Envoy's X-RateLimit-* (draft-polli-ratelimit-headers-03)
		name:   "draft03",
		fields: []string{HeaderXRateLimitLimit, HeaderXRateLimitRemaining, HeaderXRateLimitReset},
		render: appendDraft03,
	},
}

// dialectNames lists the names response.rate_limit_headers accepts, for an error message.
func dialectNames() string {
	names := make([]string, 0, len(dialects)+1)
	for _, d := range dialects {
		names = append(names, d.name)
	}
	return strings.Join(append(names, "none"), ", ")
}

// appendParam appends ";name=".
func appendParam(buf []byte, name string) []byte {
	buf = append(append(buf, ';'), name...)
	return append(buf, '=')
}

// appendStructured appends a structured dialect's two Lists (see Response): the policy field and
// the service-limit field, one member per outcome.
func appendStructured(d *dialect, dst []Field, buf []byte, outcomes []Outcome, jitter int64) ([]Field, []byte) {
	if l := outcomes[0].Limit; len(outcomes) == 1 && l.policyOf == d && !outcomes[0].Partition.set {
		dst = append(dst, Field{d.fields[0], l.policy}) // rendered at compile: no copy
	} else {
		start := len(buf)
		for i := range outcomes {
			if i > 0 {
				buf = append(buf, ", "...)
			}
			buf = outcomes[i].Limit.appendPolicy(buf, d, outcomes[i].Period)
			buf = d.appendPK(buf, &outcomes[i].Partition)
		}
		dst = append(dst, Field{d.fields[0], buf[start:]})
	}
	start := len(buf)
	for i := range outcomes {
		if i > 0 {
			buf = append(buf, ", "...)
		}
		buf = d.appendLimit(buf, &outcomes[i], jitter)
	}
	return append(dst, Field{d.fields[1], buf[start:]}), buf
}

// appendLimit appends the service-limit member of one outcome.
func (d *dialect) appendLimit(buf []byte, o *Outcome, jitter int64) []byte {
	if l := o.Limit; l.policy != nil {
		buf = append(buf, l.policy[:l.sfName]...)
	} else {
		buf = sfv.AppendString(buf, l.Name)
	}
	buf = sfv.AppendInteger(appendParam(buf, d.available), max(o.Decision.Remaining, 0))
	// A concurrency limit has no effective window: when a permit comes back depends on requests in
	// flight, not on a clock.
	if d.effective != "" && o.Limit.Concurrency == 0 {
		buf = sfv.AppendInteger(appendParam(buf, d.effective), effectiveSeconds(o, jitter))
	}
	if d.cost != "" && o.Cost > 0 {
		buf = sfv.AppendInteger(appendParam(buf, d.cost), o.Cost)
	}
	return d.appendPK(buf, &o.Partition)
}

// appendPK appends the partition parameter of pk, if it is set.
func (d *dialect) appendPK(buf []byte, pk *PartitionKey) []byte {
	if !pk.set || d.partition == "" {
		return buf
	}
	return sfv.AppendByteSequence(appendParam(buf, d.partition), pk.sum[:])
}

// renderPolicies renders the policy member of every limit of the configuration once, at the end of
// its compilation (nothing changes a LimitSpec afterwards), in the configuration's structured dialect,
// for appendStructured to copy.
func (c *Config) renderPolicies() {
	d := c.Response.structured()
	render := func(set *LimitSet) {
		for i := range set.Limits {
			l := &set.Limits[i]
			if l.Limit.Calendar.Unit != 0 {
				continue // its w is the length of the period at hand: rendered with each outcome
			}
			l.policy = sfv.AppendString(nil, l.Name)
			l.sfName = len(l.policy)
			l.policy, l.policyOf = appendPolicyParams(l.policy, l, d, 0), d
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

// structured returns the enabled structured dialect, or the first of the table when none is.
func (r *Response) structured() *dialect {
	for _, d := range r.dialects {
		if d.quota != "" {
			return d
		}
	}
	return dialects[0]
}

// appendPolicy appends the limit's policy member in dialect d for an outcome in a calendar period of
// length period (Outcome.Period): the one rendered with its configuration, or (for a calendar
// window, a LimitSpec built by hand, or another dialect) a fresh rendering.
func (l *LimitSpec) appendPolicy(buf []byte, d *dialect, period time.Duration) []byte {
	if l.policyOf == d {
		return append(buf, l.policy...)
	}
	return appendPolicyParams(sfv.AppendString(buf, l.Name), l, d, period)
}

// appendPolicyParams appends the parameters of a policy member: the quota, the window of a rate limit
// (for a calendar window the length of the current period, period: see periodSeconds), and always the quota unit (requests, content-bytes or concurrent-requests), although the draft
// makes "requests" the default, so that a client never has to know the default.
func appendPolicyParams(buf []byte, l *LimitSpec, d *dialect, period time.Duration) []byte {
	if c := l.Concurrency; c > 0 { // no window: a permit lasts as long as its request
		buf = sfv.AppendInteger(appendParam(buf, d.quota), c)
		return append(appendParam(buf, d.unit), `"concurrent-requests"`...)
	}
	buf = sfv.AppendInteger(appendParam(buf, d.quota), max(l.Limit.Quota, 0))
	buf = sfv.AppendInteger(appendParam(buf, d.window), periodSeconds(l, period))
	if l.ContentBytes {
		return append(appendParam(buf, d.unit), `"content-bytes"`...)
	}
	return append(appendParam(buf, d.unit), `"requests"`...)
}
