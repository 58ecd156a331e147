package rules

import (
	"encoding/binary"
	"math/bits"
	"strings"
	"time"
	"unsafe"

	"github.com/meshlimit/meshlimit/algorithms"
	"github.com/meshlimit/meshlimit/internal/sfv"
	"github.com/meshlimit/meshlimit/internal/siphash"
)

// Header field names, lower-case as HTTP/2 and the proxy-wasm host use them.
const (
	HeaderRateLimitPolicy     = "ratelimit-policy"
	HeaderRateLimit           = "ratelimit"
	HeaderRetryAfter          = "retry-after"
	HeaderXRateLimitLimit     = "x-ratelimit-limit"
	HeaderXRateLimitRemaining = "x-ratelimit-remaining"
	HeaderXRateLimitReset     = "x-ratelimit-reset"
	headerContentType         = "content-type"
)

// gRPC statuses passed to the host's send_local_response.
const (
	// NoGRPCStatus tells the host the local response is not a gRPC one.
	NoGRPCStatus int32 = -1
	// GRPCResourceExhausted is RESOURCE_EXHAUSTED, what Envoy's
	// rate_limited_as_resource_exhausted answers gRPC requests with.
	GRPCResourceExhausted int32 = 8
)

const (
	problemType  = "https://iana.org/assignments/http-problem-types#quota-exceeded"
	problemTitle = "Request cannot be satisfied as assigned quota has been exceeded"
	// The draft's problem type for a client denied for what it did, not for how much: meshlimit
	// uses it for a key in a count_on penalty box.
	abnormalType  = "https://iana.org/assignments/http-problem-types#abnormal-usage-detected"
	abnormalTitle = "Request not satisfied due to detection of abnormal request pattern"
)

// headerSet is a bit set of quota header dialects.
type headerSet uint8

const (
	setIETF headerSet = 1 << iota
	setDraft03
)

// Response is the compiled top-level response configuration: it renders quota headers
// for allowed requests and the local response for denied ones. It is immutable.
//
// The quota headers follow draft-ietf-httpapi-ratelimit-headers-10, both Structured Field
// Lists (RFC 9651) with one member per policy, the policy name as an sf-string:
//
//	RateLimit-Policy: "api-per-ip-0";q=10;w=1;qu="requests", "api-per-ip-1";q=1000;w=3600;qu="requests"
//	RateLimit: "api-per-ip-0";r=0;t=1, "api-per-ip-1";r=958;t=3550
//
// The parameters:
//   - q is the limit's quota and w its window in seconds, rounded up (at least 1); a
//     concurrency limit has no w.
//   - qu is the quota unit, always written: "requests", "content-bytes" (a cost in body
//     bytes) or "concurrent-requests" (a concurrency limit).
//   - pk, on both fields and only with response.partition_key, is the outcome's
//     PartitionKey: 8 bytes of a keyed hash of the key value, as a Byte Sequence.
//   - r is the quota units remaining (never negative).
//   - t is the seconds until additional quota is available, as draft-10 defines it (not
//     until the quota is fully restored): for a policy that denied the request, until the
//     request would be admitted (Decision.RetryAfter, rounded up, at least 1); for any other
//     policy, until its remaining quota next grows, rounded up, and 0 exactly when nothing
//     is used (Remaining at capacity). For the buckets that is the next unit's refill, for
//     the fixed window the window's end; for the sliding log and the sliding window counter
//     the decision carries only the time until the quota is full (Decision.Reset), which t
//     reports: an upper bound, never earlier than the truth. A policy that would have
//     admitted a request another policy denied is reported uncharged (callers pass the
//     decision without the request: see sharedstate.Outcome). Rounding up means t is never
//     0 while quota is still coming back.
//
// Members are ordered most restrictive first, so clients that read one member read the one
// that matters: policies that denied (longest wait first), then the others (fewest
// remaining first, then latest reset); ties keep configuration order. Every integer is
// clamped to the Structured Field range (15 digits).
//
// A denied response also carries Retry-After: the largest t among the policies that denied
// (at least 1 second), plus a jitter of 0 to retry_after_jitter seconds (rounded up) drawn
// from the caller's random value. So Retry-After is never earlier than any denying
// policy's t, as the draft requires. A request whose cost exceeds a denying limit's
// capacity can never be admitted (algorithms.RetryNever): its response has no Retry-After,
// and that policy's t falls back to the time until its quota is fully restored.
//
// The draft03 set is Envoy's: X-RateLimit-Limit "<q>, <q>;w=<w>;name="<policy>", ..." with
// the first member's quota in front, X-RateLimit-Remaining and X-RateLimit-Reset from the
// first (most restrictive) member.
type Response struct {
	// Status is the HTTP status of a denied, non-gRPC request.
	Status uint32
	// QuotaHeadersOnAllowed reports whether AppendAllowed renders anything.
	QuotaHeadersOnAllowed bool
	// RetryAfterJitter is the most Retry-After is lengthened by.
	RetryAfterJitter time.Duration
	// ExplainHeader is the lower-case name of the header that names the denying rule, or "".
	ExplainHeader string

	sets         headerSet
	problem      bool
	contentType  []byte
	textBody     []byte
	problemHead  []byte // `{"type":…,"title":…,"status":N[,"detail":…]`
	abnormalHead []byte // the same with the abnormal-usage-detected type
	grpcMessage  []byte
	extra        []Field // sorted by name; values are immutable
	jitterSecond int64
	partitionKey bool      // response.partition_key
	pkKey        [2]uint64 // the SipHash key, from response.partition_key_secret
}

// Field is one rendered response header. Name is lower-case. Value aliases the buffer
// passed to the rendering method, and stays valid until the caller reuses that buffer, or
// the configuration's own immutable memory; either way the caller must not modify it. To
// pass it to the host as a string without copying, the caller may use unsafe.String.
type Field struct {
	Name  string
	Value []byte
}

// Outcome is the decision of one limit for a request, as the response reports it. Callers
// pass the outcomes of enforced rules only: shadow rules must not change what clients see.
type Outcome struct {
	Limit    *LimitSpec
	Decision algorithms.Decision
	// Partition is the pk parameter of the outcome's members: Response.Partition of the rule and
	// key that gave the outcome (the zero value renders no pk).
	Partition PartitionKey
	// Abnormal marks a denial for abnormal usage (a key in a count_on penalty box): a problem
	// document then has the abnormal-usage-detected type.
	Abnormal bool
}

// PartitionKey is the pk parameter of a RateLimit-Policy or RateLimit member: 8 bytes of a keyed
// hash of a rule's key value, never the value itself. The zero value is "no pk".
type PartitionKey struct {
	sum [8]byte
	set bool
}

// Partition returns the partition key of the key value key of rule: when response.partition_key
// is on, the first 8 bytes (big-endian) of SipHash-2-4 of the rule's fingerprint followed by key,
// keyed with response.partition_key_secret; otherwise the zero PartitionKey. Key values are often
// client identities (an IP address, an API key, a user), which the response must not disclose to
// whoever reads it on the way (caches, logs, browser scripts): a keyed hash names the partition
// without revealing it, and without the secret nobody can confirm a guessed value, even for a
// low-entropy key such as an IPv4 address (2^32 guesses). The fingerprint makes the pk of one key
// differ between rules, and change when a rule's limits change (when its counters start afresh).
// The same key gets the same pk on every worker and every proxy with the same configuration.
// Partition does not allocate.
func (r *Response) Partition(rule *Rule, key []byte) PartitionKey {
	if !r.partitionKey || rule == nil { // inlined at the caller: no call when partition_key is off
		return PartitionKey{}
	}
	return r.partition(rule, key)
}

func (r *Response) partition(rule *Rule, key []byte) PartitionKey {
	pk := PartitionKey{set: true}
	binary.BigEndian.PutUint64(pk.sum[:], siphash.Sum64(r.pkKey[0], r.pkKey[1], rule.fingerprint, key))
	return pk
}

// PartitionString is Partition for a key held as a string.
func (r *Response) PartitionString(rule *Rule, key string) PartitionKey {
	if !r.partitionKey || rule == nil {
		return PartitionKey{}
	}
	return r.Partition(rule, unsafe.Slice(unsafe.StringData(key), len(key))) // read only
}

// appendPK appends ";pk=:<base64>:" when pk is set.
func appendPK(buf []byte, pk *PartitionKey) []byte {
	if !pk.set {
		return buf
	}
	return sfv.AppendByteSequence(append(buf, ";pk="...), pk.sum[:])
}

// LocalResponse is a rendered denied response, for proxywasm.SendHttpResponse (status,
// headers, body, gRPC status). Its slices are reused across calls to Deny.
type LocalResponse struct {
	// Status is the HTTP status: the configured one, or 200 for gRPC requests.
	Status uint32
	// GRPCStatus is GRPCResourceExhausted for gRPC requests, else NoGRPCStatus. Envoy then
	// sends a trailers-only reply with grpc-status 8 and Body as grpc-message.
	GRPCStatus int32
	Headers    []Field
	Body       []byte
}

// IsGRPC reports whether a request content-type denotes gRPC, as Envoy decides it:
// "application/grpc" alone or followed by "+" or ";" (so not gRPC-Web).
func IsGRPC(contentType string) bool {
	const p = "application/grpc"
	if len(contentType) < len(p) || !strings.EqualFold(contentType[:len(p)], p) {
		return false
	}
	return len(contentType) == len(p) || contentType[len(p)] == '+' || contentType[len(p)] == ';'
}

// AppendAllowed appends the quota headers for an allowed request (to be added to the
// upstream's response) to dst, rendering their values into buf, and returns both extended.
// It renders nothing when quota_headers_on_allowed is false, no header set is enabled or
// outcomes is empty. It reorders outcomes (most restrictive first) and does not allocate
// when dst and buf have room.
func (r *Response) AppendAllowed(dst []Field, buf []byte, outcomes []Outcome) ([]Field, []byte) {
	if !r.QuotaHeadersOnAllowed || len(outcomes) == 0 {
		return dst, buf
	}
	sortOutcomes(outcomes)
	return r.appendQuota(dst, buf, outcomes)
}

// Deny renders the local response for a denied request into dst, reusing its slices, with
// values rendered into buf, and returns the extended buf. outcomes are the enforced limits
// that applied (those that denied and those that allowed); an empty list (a denial by
// failure_mode "deny") renders no quota headers and Retry-After: 1 plus jitter. grpc
// selects the gRPC form (see IsGRPC). random is any uniformly distributed value; it only
// picks the Retry-After jitter, so tests can pass a constant. Deny reorders outcomes.
func (r *Response) Deny(dst *LocalResponse, buf []byte, outcomes []Outcome, grpc bool, random uint64) []byte {
	sortOutcomes(outcomes)
	dst.Headers = dst.Headers[:0]
	dst.Status, dst.GRPCStatus = r.Status, NoGRPCStatus
	if grpc {
		dst.Status, dst.GRPCStatus = 200, GRPCResourceExhausted
	}
	dst.Headers, buf = r.appendQuota(dst.Headers, buf, outcomes)
	dst.Headers, buf = r.appendRetryAfter(dst.Headers, buf, outcomes, random)
	if grpc {
		for _, f := range r.extra {
			if f.Name != headerContentType {
				dst.Headers = append(dst.Headers, f)
			}
		}
		dst.Body = r.grpcMessage
		return buf
	}
	ownType := true
	for _, f := range r.extra {
		if f.Name == headerContentType {
			ownType = false
		}
	}
	if ownType {
		dst.Headers = append(dst.Headers, Field{headerContentType, r.contentType})
	}
	dst.Headers = append(dst.Headers, r.extra...)
	if !r.problem {
		dst.Body = r.textBody
		return buf
	}
	start := len(buf)
	buf = r.appendProblem(buf, outcomes)
	dst.Body = buf[start:]
	return buf
}

// appendRetryAfter appends Retry-After: the longest wait of the limits that denied, at least 1 s,
// plus the configured jitter; none when a denying cost can never fit.
func (r *Response) appendRetryAfter(dst []Field, buf []byte, outcomes []Outcome, random uint64) ([]Field, []byte) {
	var retry int64 = 1
	for i := range outcomes {
		if d := &outcomes[i].Decision; !d.Allowed {
			if d.RetryAfter == algorithms.RetryNever {
				return dst, buf
			}
			retry = max(retry, retrySeconds(d))
		}
	}
	if r.jitterSecond > 0 {
		retry += int64(random % uint64(r.jitterSecond+1))
	}
	start := len(buf)
	buf = sfv.AppendInteger(buf, retry)
	return append(dst, Field{HeaderRetryAfter, buf[start:]}), buf
}

// appendProblem appends the problem document of a denial, naming the limits that denied.
func (r *Response) appendProblem(buf []byte, outcomes []Outcome) []byte {
	head := r.problemHead
	for i := range outcomes {
		if outcomes[i].Abnormal && !outcomes[i].Decision.Allowed {
			head = r.abnormalHead
		}
	}
	buf = append(buf, head...)
	first := true
	for i := range outcomes {
		if outcomes[i].Decision.Allowed {
			continue
		}
		if first {
			buf = append(buf, `,"violated-policies":[`...)
		} else {
			buf = append(buf, ',')
		}
		first = false
		// Policy names are [A-Za-z0-9_.-]: nothing to escape.
		buf = append(buf, '"')
		buf = append(buf, outcomes[i].Limit.Name...)
		buf = append(buf, '"')
	}
	if !first {
		buf = append(buf, ']')
	}
	return append(buf, '}')
}

// appendQuota appends the enabled quota header sets for sorted outcomes.
func (r *Response) appendQuota(dst []Field, buf []byte, outcomes []Outcome) ([]Field, []byte) {
	if len(outcomes) == 0 {
		return dst, buf
	}
	if r.sets&setIETF != 0 {
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
		dst = append(dst, Field{HeaderRateLimit, buf[start:]})
	}
	if r.sets&setDraft03 != 0 {
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
		dst = append(dst, Field{HeaderXRateLimitReset, buf[start:]})
	}
	return dst, buf
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

// headerSetNames renders the enabled sets for the summary.
func (r *Response) headerSetNames() string {
	switch r.sets {
	case setIETF:
		return "ietf"
	case setDraft03:
		return "draft03"
	case setIETF | setDraft03:
		return "ietf+draft03"
	}
	return "none"
}

// reservedHeaders are set by the filter itself and cannot be configured as extra headers.
var reservedHeaders = []string{
	HeaderRateLimitPolicy, HeaderRateLimit, HeaderRetryAfter, HeaderXRateLimitLimit,
	HeaderXRateLimitRemaining, HeaderXRateLimitReset, "content-length", "grpc-status", "grpc-message",
}

// Pairs converts fields to the [][2]string form of proxywasm.SendHttpResponse, appending to
// dst. It copies all values into one string, so it allocates once however many fields
// there are.
func Pairs(dst [][2]string, fields []Field) [][2]string {
	n := 0
	for _, f := range fields {
		n += len(f.Value)
	}
	var b strings.Builder
	b.Grow(n)
	for _, f := range fields {
		b.Write(f.Value)
	}
	all := b.String()
	off := 0
	for _, f := range fields {
		dst = append(dst, [2]string{f.Name, all[off : off+len(f.Value)]})
		off += len(f.Value)
	}
	return dst
}
