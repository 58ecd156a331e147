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
	if l := outcomes[0].Limit; len(outcomes) == 1 && l.policyOf == d && l.policy != nil && !outcomes[0].Partition.set {
		dst = append(dst, Field{d.fields[0], l.policy}) // rendered at compile: no copy
	} else if field := setPolicy(outcomes, d); field != nil {
		dst = append(dst, Field{d.fields[0], field}) // a set's limits in order: no copy either
	} else {
		start := len(buf)
		var pk partitionParam
		for i := range outcomes {
			o := &outcomes[i]
			buf = o.Limit.appendPolicy(buf, d, o.Period, i > 0)
			if o.Partition.set {
				buf = pk.append(buf, d, &o.Partition)
			}
		}
		dst = append(dst, Field{d.fields[0], buf[start:]})
	}
	start := len(buf)
	buf = appendLimitMembers(buf, d, outcomes, jitter)
	return append(dst, Field{d.fields[1], buf[start:]}), buf
}

// appendLimit appends the service-limit member of one outcome, after ", " when next, without its
// partition parameter.
func (d *dialect) appendLimit(buf []byte, o *Outcome, jitter int64, next bool) []byte {
	if l := o.Limit; l.policyOf == d {
		head := l.headNext
		if !next {
			head = head[2:]
		}
		buf = append(buf, head...)
	} else {
		if next {
			buf = append(buf, ',', ' ')
		}
		buf = appendParam(sfv.AppendString(buf, l.Name), d.available)
	}
	buf = sfv.AppendInteger(buf, max(o.Decision.Remaining, 0))
	// A concurrency limit has no effective window: when a permit comes back depends on requests in
	// flight, not on a clock.
	if d.effective != "" && o.Limit.Concurrency == 0 {
		buf = sfv.AppendInteger(appendShortParam(buf, d.effective), effectiveSeconds(o, jitter))
	}
	if d.cost != "" && o.Cost > 0 {
		buf = sfv.AppendInteger(appendParam(buf, d.cost), o.Cost)
	}
	return buf
}

// appendShortParam is appendParam for the one-letter names of the shipped dialects, written byte
// by byte: a copy is a call on wasm.
func appendShortParam(buf []byte, name string) []byte {
	if len(name) != 1 {
		return appendParam(buf, name)
	}
	return append(buf, ';', name[0], '=')
}

// partitionParam is the partition parameter of the members of one field: the outcomes of one
// rule share a partition key, which is encoded once and copied for the others.
type partitionParam struct {
	// key is the partition key encoded in param[:n] (n is 0 before the first).
	key   PartitionKey
	param [32]byte
	n     int
}

// partitionValueLen is the length of a partition key's sf-binary: 8 bytes in base64 between colons.
const partitionValueLen = 1 + 12 + 1

// append appends the partition parameter of pk in dialect d, if it has one.
func (p *partitionParam) append(buf []byte, d *dialect, pk *PartitionKey) []byte {
	if d.partition == "" {
		return buf
	}
	if enc, ok := p.encoded(d, pk); ok {
		return append(buf, enc...)
	}
	return sfv.AppendByteSequence(appendParam(buf, d.partition), pk.sum[:]) // no room: encoded in place
}

// encoded returns the partition parameter of pk in dialect d (which has one), encoded once for the
// members that share pk, or ok=false when d's parameter name is too long to be kept in p.
func (p *partitionParam) encoded(d *dialect, pk *PartitionKey) (param []byte, ok bool) {
	if len(d.partition) > len(p.param)-partitionValueLen-2 {
		return nil, false
	}
	if p.n == 0 || p.key != *pk {
		p.key, p.n = *pk, len(sfv.AppendByteSequence(appendParam(p.param[:0], d.partition), pk.sum[:]))
	}
	return p.param[:p.n], true
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
// length period (Outcome.Period), after ", " when next: the one rendered with its configuration,
// or (for a calendar window, a LimitSpec built by hand, or another dialect) a fresh rendering.
func (l *LimitSpec) appendPolicy(buf []byte, d *dialect, period time.Duration, next bool) []byte {
	if l.policyOf == d && l.policy != nil {
		if !next {
			return append(buf, l.policy...)
		}
		return append(buf, l.policyNext...)
	}
	if next {
		buf = append(buf, ',', ' ')
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
