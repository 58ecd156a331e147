package rules

import (
	"strings"
	"time"

	"github.com/meshlimit/meshlimit/algorithms"
	"github.com/meshlimit/meshlimit/internal/sfv"
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
