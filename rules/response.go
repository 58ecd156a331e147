package rules

import (
	"math/bits"
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

// Response is the compiled top-level response configuration: it renders quota headers
// for allowed requests and the local response for denied ones. It is immutable.
//
// The quota headers are those of the dialects response.rate_limit_headers enables (dialect.go).
// The "ietf" dialect follows draft-ietf-httpapi-ratelimit-headers-11: two Structured Field Lists
// (RFC 9651) with one member per policy, the policy name as an sf-string:
//
//	RateLimit-Policy: "api-per-ip-0";q=10;w=1;qu="requests", "api-per-ip-1";q=1000;w=3600;qu="requests"
//	RateLimit: "api-per-ip-0";r=0;t=1, "api-per-ip-1";r=958;t=4
//
// The parameters:
//   - q is the limit's quota and w its window in seconds, rounded up (at least 1); a
//     concurrency limit has no w. A calendar window's w is the real length of the period the
//     decision fell in (Outcome.Period): 2678400 for January, 2419200 or 2505600 for February,
//     604800 for a week, 31536000 or 31622400 for a year.
//   - qu is the quota unit, always written: "requests", "content-bytes" (a cost in body
//     bytes) or "concurrent-requests" (a concurrency limit).
//   - pk, on both fields and only with response.partition_key, is the outcome's
//     PartitionKey: 8 bytes of a keyed hash of the key value, as a Byte Sequence.
//   - r is the available quota, Decision.Remaining (never negative).
//   - t is the effective window, "the number of seconds within which the client can use no
//     more than the available quota" (§4.1.2): Decision.EffectiveWindow, the time until one
//     unit more than r could be admitted had r been spent at once, rounded up (so at least 1).
//     For the buckets that is the next unit's refill (one unit's when the bucket is full), for
//     the fixed window the window's end, for the sliding log the expiry of its oldest live
//     entry, for the sliding window counter the time until earlier use weighs one unit less.
//     A denying policy's t is the same, and ends no later than its Retry-After. The global
//     service's answers carry it (wire.Decision.EffectiveMs). A decision without an effective
//     window (a cached denial, an answer of an older service) gets what
//     algorithms.Limit.EffectiveWindowOf derives: exact for the buckets, the request's wait
//     on a denial, else the time until the quota is full (an upper bound), 0 for an unused
//     window. A policy that would have admitted a request another policy denied is reported
//     uncharged (callers pass the decision without the request: see sharedstate.Outcome). A
//     concurrency limit has no t: a permit comes back when a request ends, not at a time.
//
// Members are ordered most restrictive first, so clients that read one member read the one
// that matters: policies that denied (longest wait first), then the others (least available
// quota first, then the one that is full again last); ties keep configuration order. Every
// integer is clamped to the Structured Field range (15 digits).
//
// A denied response also carries Retry-After: the longest wait among the policies that denied
// (Decision.RetryAfter, rounded up, at least 1 second), plus a jitter of 0 to retry_after_jitter
// seconds (rounded up), and never less than a denying policy's t as sent: "the Retry-After field
// value SHOULD NOT reference a point in time earlier than the end of the effective window" (§6).
// A request whose cost exceeds a denying limit's capacity can never be admitted
// (algorithms.RetryNever): its response has no Retry-After.
//
// With effective_window_jitter, every t of a response is lengthened by the same 0 to that many
// whole seconds, drawn from the caller's random value, so that clients limited together do not
// all come back at once ("adding some jitter to the effective window", §8.5). Jitter only adds:
// t is never shorter than the effective window.
//
// The draft03 dialect is Envoy's: X-RateLimit-Limit "<q>, <q>;w=<w>;name="<policy>", ..." with
// the first member's quota in front, X-RateLimit-Remaining and X-RateLimit-Reset (its t) from
// the first (most restrictive) member.
type Response struct {
	// Status is the HTTP status of a denied, non-gRPC request.
	Status uint32
	// QuotaHeadersOnAllowed reports whether AppendAllowed renders anything.
	QuotaHeadersOnAllowed bool
	// RetryAfterJitter is the most Retry-After is lengthened by.
	RetryAfterJitter time.Duration
	// WindowJitter is the most every t is lengthened by (effective_window_jitter).
	WindowJitter time.Duration
	// ExplainHeader is the lower-case name of the header that names the denying rule, or "".
	ExplainHeader string

	dialects     []*dialect // enabled, in the order of the table
	problem      bool
	contentType  []byte
	textBody     []byte
	problemHead  []byte // `{"type":…,"title":…,"status":N[,"detail":…]`
	abnormalHead []byte // the same with the abnormal-usage-detected type
	grpcMessage  []byte
	extra        []Field   // sorted by name; values are immutable
	jitterSecond int64     // retry_after_jitter, whole seconds
	windowSecond int64     // effective_window_jitter, whole seconds
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
	// Period is the length of the calendar period the decision fell in, for a calendar window
	// (Limit.Limit.Calendar; the filter sets it from Calendar.Period at the decision's time): the
	// policy's w. It is 0 for the other limits, whose w is their Window; a calendar outcome without
	// it renders the unit's longest period (algorithms.CalendarUnit.MaxLength).
	Period time.Duration
	// Partition is the pk parameter of the outcome's members: Response.Partition of the rule and
	// key that gave the outcome (the zero value renders no pk).
	Partition PartitionKey
	// Abnormal marks a denial for abnormal usage (a key in a count_on penalty box): a problem
	// document then has the abnormal-usage-detected type.
	Abnormal bool
	// Cost is the request's cost in the limit's units, for a dialect with a cost parameter (none
	// of the shipped ones, so callers leave it 0, which writes none).
	Cost int64
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
// outcomes is empty. random is any uniformly distributed value; it only picks the jitter of t
// (effective_window_jitter), so tests can pass a constant. It reorders outcomes (most
// restrictive first) and does not allocate when dst and buf have room.
func (r *Response) AppendAllowed(dst []Field, buf []byte, outcomes []Outcome, random uint64) ([]Field, []byte) {
	if !r.QuotaHeadersOnAllowed || len(outcomes) == 0 {
		return dst, buf
	}
	sortOutcomes(outcomes)
	return r.appendQuota(dst, buf, outcomes, r.windowJitter(random))
}

// Deny renders the local response for a denied request into dst, reusing its slices, with
// values rendered into buf, and returns the extended buf. outcomes are the enforced limits
// that applied (those that denied and those that allowed); an empty list (a denial by
// failure_mode "deny") renders no quota headers and Retry-After: 1 plus jitter. grpc
// selects the gRPC form (see IsGRPC). random is any uniformly distributed value; it only
// picks the jitters of Retry-After and t, so tests can pass a constant. Deny reorders outcomes.
func (r *Response) Deny(dst *LocalResponse, buf []byte, outcomes []Outcome, grpc bool, random uint64) []byte {
	sortOutcomes(outcomes)
	dst.Headers = dst.Headers[:0]
	dst.Status, dst.GRPCStatus = r.Status, NoGRPCStatus
	if grpc {
		dst.Status, dst.GRPCStatus = 200, GRPCResourceExhausted
	}
	window := r.windowJitter(random)
	dst.Headers, buf = r.appendQuota(dst.Headers, buf, outcomes, window)
	dst.Headers, buf = r.appendRetryAfter(dst.Headers, buf, outcomes, random, window)
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
// plus the configured jitter, and at least the t sent for each of them (with window, its jitter);
// none when a denying cost can never fit.
func (r *Response) appendRetryAfter(dst []Field, buf []byte, outcomes []Outcome, random uint64, window int64) ([]Field, []byte) {
	var retry, end int64 = 1, 0
	for i := range outcomes {
		o := &outcomes[i]
		if d := &o.Decision; !d.Allowed {
			if d.RetryAfter == algorithms.RetryNever {
				return dst, buf
			}
			retry = max(retry, retrySeconds(d))
			if o.Limit.Concurrency == 0 {
				end = max(end, effectiveSeconds(o, window))
			}
		}
	}
	if r.jitterSecond > 0 {
		retry += int64(random % uint64(r.jitterSecond+1))
	}
	start := len(buf)
	buf = sfv.AppendInteger(buf, min(max(retry, end), sfv.MaxInteger))
	return append(dst, Field{HeaderRetryAfter, buf[start:]}), buf
}

// AllowedUsesRandom reports whether AppendAllowed reads its random argument (effective_window_jitter
// is set): without it the caller passes 0 and draws nothing.
func (r *Response) AllowedUsesRandom() bool { return r.windowSecond > 0 }

// windowJitter is the jitter of t that random picks: 0 to effective_window_jitter whole seconds,
// drawn from other bits of random than the Retry-After jitter.
func (r *Response) windowJitter(random uint64) int64 {
	if r.windowSecond == 0 {
		return 0
	}
	return int64(bits.RotateLeft64(random, 32) % uint64(r.windowSecond+1))
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

// headerSetNames renders the enabled dialects for the summary.
func (r *Response) headerSetNames() string {
	if len(r.dialects) == 0 {
		return "none"
	}
	names := make([]string, len(r.dialects))
	for i, d := range r.dialects {
		names[i] = d.name
	}
	return strings.Join(names, "+")
}

// reservedHeaders are set by the filter itself and cannot be configured as extra headers.
var reservedHeaders = []string{
	HeaderRateLimitPolicy, HeaderRateLimit, HeaderRetryAfter, HeaderXRateLimitLimit,
	HeaderXRateLimitRemaining, HeaderXRateLimitReset, "content-length", "grpc-status", "grpc-message",
}
