package rules

import (
	"errors"
	"strings"

	"github.com/meshlimit/meshlimit/rules/body"
)

// Errors of a body a settling rule reads besides body's. The filter counts them; each leaves the
// reservation as it is (a request reserves its default).
var (
	errBodyTooLarge = errors.New("the body is larger than max_body")
	errNotPositive  = errors.New("the field is not a positive integer")
)

// Reserve, then settle. A rule's cost may be known only once the answer is: the tokens an LLM
// used, the bytes a download sent. Such a rule reserves an estimate when the request is decided
// (rules[].cost: a constant, a request header, the request's content-length, or an integer field of
// the request's JSON body such as max_tokens, bounded by max) and settles the reservation when the
// stream ends, from a response header, the body bytes, or an integer field of the response's JSON
// body (for a text/event-stream response: of the last event that carries it). The difference is
// refunded or charged (algorithms.Limit.Adjust). Requests in flight together are admitted only
// while their reservations fit, so they overshoot the limit by at most what they use beyond their
// reservations, and that is charged afterwards (the key waits).

// settleJSON is rules[].cost.settle: exactly one of response_header, response_json and body_bytes.
type settleJSON struct {
	// ResponseHeader names a response header holding the real cost, a non-negative integer.
	ResponseHeader string `json:"response_header"`
	// ResponseJSON is the dotted path of an integer field of the response's JSON body, e.g.
	// "usage.total_tokens"; for a text/event-stream response, of the last event that has it.
	ResponseJSON string `json:"response_json"`
	// BodyBytes settles to the body bytes that passed: "request", "response" or "both".
	BodyBytes string `json:"body_bytes"`
	// OnError is what a response with a 5xx status settles to: "refund" (nothing is charged) or
	// "keep" (the reservation). Default "refund".
	OnError string `json:"on_error"`
	// OnMissing is what an answer without a usable cost settles to (no usage field, a body cut
	// short or unreadable, no response at all): "max" (the rule's cost.max) or "reservation" (what
	// the request reserved). Default "max": the client never chooses what it pays.
	OnMissing string `json:"on_missing"`
}

// SettleSource says where a settled cost is read.
type SettleSource uint8

// Settle sources.
const (
	SettleResponseHeader SettleSource = iota + 1
	SettleResponseJSON
	SettleBodyBytes
)

// BodyBytes says which body bytes a SettleBodyBytes cost counts.
type BodyBytes uint8

// Body byte selections.
const (
	BytesRequest  BodyBytes = 1
	BytesResponse BodyBytes = 2
	BytesBoth               = BytesRequest | BytesResponse
)

// Settle is a compiled rules[].cost.settle.
type Settle struct {
	Source SettleSource
	// Header is the lower-case response header of SettleResponseHeader.
	Header string
	// Path is the JSON path of SettleResponseJSON.
	Path []string
	// Bytes is what SettleBodyBytes counts.
	Bytes BodyBytes
	// KeepOnError keeps the reservation of a 5xx response instead of refunding it.
	KeepOnError bool
	// KeepOnMissing settles an answer without a usable cost to its reservation instead of the
	// rule's max (on_missing "reservation").
	KeepOnMissing bool
}

// reserveSpec is what a settling rule adds to its cost.
type reserveSpec struct {
	requestJSON []string // the JSON path of a reservation read from the request body, or nil
	promptBytes int64    // with requestJSON: one unit more per promptBytes bytes of the body; 0 for none
	settle      *Settle
	maxBody     int
	bytes       bool // the cost is body bytes (RateLimit-Policy qu="content-bytes")
}

// Settle returns the rule's settlement, or nil when the cost is final when the request is decided.
func (r *Rule) Settle() *Settle {
	if r.cost.reserve == nil {
		return nil
	}
	return r.cost.reserve.settle
}

// ReservesFromBody reports whether the rule's reservation is a field of the request's JSON body:
// the decision then waits for the request body (at most MaxBody bytes of it).
func (r *Rule) ReservesFromBody() bool {
	return r.cost.reserve != nil && r.cost.reserve.requestJSON != nil
}

// MaxBody is how many bytes of a body the rule reads for a JSON field.
func (r *Rule) MaxBody() int {
	if r.cost.reserve == nil {
		return defaultMaxBody
	}
	return r.cost.reserve.maxBody
}

// countsBytes reports whether the rule's cost is body bytes.
func (r *Rule) countsBytes() bool { return r.cost.reserve != nil && r.cost.reserve.bytes }

// BodyCost returns the reservation of a rule that ReservesFromBody, read from the request body:
// the integer at the rule's JSON path, plus with prompt_bytes one unit per prompt_bytes bytes of
// the body (of what was held, for a body past max_body: an estimate of the prompt's tokens), at
// most max. The configured default is reserved, and a
// non-nil error says why, when the body was cut at MaxBody (complete is false), is not JSON, lacks
// the field, or holds there anything but a positive integer (max_tokens: 0 reserves the default:
// a client cannot make its reservation vanish).
//
// A client cannot reserve less than the upstream may read: every copy of the field counts and the
// highest is reserved; a copy that is not a plain positive integer (0 included: an upstream may
// take it for "no limit") counts as the default, or as the value a lenient parser reads in it when
// that is higher (1e3 and 1000.0 and "1000" reserve 1000, 999.5 reserves 1000, a number too large
// reserves max); the body may be in UTF-16 or UTF-32 or start with a byte order mark, and the
// member's name may be in any case (see body.JSONInt). A body nested deeper than this reader goes (10000
// levels, which no client needs) reserves max.
func (r *Rule) BodyCost(doc []byte, complete bool) (int64, error) {
	n, err := r.bodyCost(doc, complete)
	if pb := r.cost.reserve.promptBytes; pb > 0 {
		n = min(n+(int64(len(doc))+pb-1)/pb, r.cost.max) // a body past max_body: at least what was held
	}
	return n, err
}

func (r *Rule) bodyCost(doc []byte, complete bool) (int64, error) {
	c := &r.cost
	if !complete {
		return c.def, errBodyTooLarge
	}
	rd, err := body.Read(doc, c.reserve.requestJSON)
	switch {
	case err == body.ErrTooDeep: // another parser may read what this one cannot: the most
		return c.max, err
	case err != nil:
		return c.def, err
	case !rd.Found:
		return c.def, body.ErrNoField
	case rd.Plain && !rd.Zero:
		return min(rd.N, c.max), nil
	}
	n := max(rd.N, rd.Lenient, c.def)
	if rd.Plain {
		return min(n, c.max), errNotPositive
	}
	return min(n, c.max), body.ErrNotInteger
}

// SettledHeader returns the cost in a SettleResponseHeader value: a non-negative integer, at most
// the rule's max.
func (r *Rule) SettledHeader(v string) (int64, bool) {
	v = trimOWS(v)
	if v == "0" {
		return 0, true
	}
	n, ok := parseCost(v)
	return min(n, r.cost.max), ok
}

// SettledValue bounds a settled cost read from a body: at most the rule's max.
func (r *Rule) SettledValue(n int64) int64 { return min(max(n, 0), r.cost.max) }

// CostBound is the most a request reserving cost can be charged: the cost's max for a rule that
// settles (SettledValue, MissingCost and UnreadCost never pass it), cost itself otherwise.
func (r *Rule) CostBound(cost int64) int64 {
	if r.cost.reserve == nil {
		return cost
	}
	return max(cost, r.cost.max)
}

// costSource compiles the reservation source of an object cost and its settle.
func (v *validator) costSource(path string, o *costObjectJSON, c *costSpec) {
	sources := 0
	for _, set := range []bool{o.Header != "", o.RequestJSON != "", o.RequestBytes} {
		if set {
			sources++
		}
	}
	if sources > 1 {
		v.failf(path, "header, request_json and request_bytes exclude each other")
	}
	if sources == 0 && o.Settle == nil {
		v.failf(path+".header", "required (or request_json, request_bytes, settle)")
	}
	if o.PromptBytes.Set && o.RequestJSON == "" {
		v.failf(path+".prompt_bytes", "only with request_json (the prompt is estimated from the request body)")
	}
	if o.Settle == nil && o.RequestJSON == "" && !o.RequestBytes {
		return
	}
	rs := &reserveSpec{maxBody: defaultMaxBody}
	c.reserve = rs
	if o.MaxBody.Set {
		rs.maxBody = int(v.intIn(path+".max_body", o.MaxBody, 1, maxMaxBody))
	}
	if o.PromptBytes.Set {
		rs.promptBytes = v.intIn(path+".prompt_bytes", o.PromptBytes, 1, maxPromptBytes)
	}
	switch {
	case o.RequestJSON != "":
		rs.requestJSON = v.jsonPath(path+".request_json", o.RequestJSON)
	case o.RequestBytes:
		c.header = "content-length" // the reservation; the settlement counts the bytes
		rs.bytes = true
		rs.settle = &Settle{Source: SettleBodyBytes, Bytes: BytesRequest}
	}
	if o.Settle != nil {
		rs.settle = v.settle(path+".settle", o.Settle)
		rs.bytes = rs.settle.Source == SettleBodyBytes
	}
	if c.header == "" {
		c.constant = c.def // the reservation before (or without) the body
	}
}

// settle compiles rules[].cost.settle.
func (v *validator) settle(path string, sj *settleJSON) *Settle {
	s := &Settle{}
	n := 0
	if sj.ResponseHeader != "" {
		n++
		s.Source = SettleResponseHeader
		if !isToken(sj.ResponseHeader) {
			v.failf(path+".response_header", "%q is not a valid header name", sj.ResponseHeader)
		}
		s.Header = strings.ToLower(sj.ResponseHeader)
	}
	if sj.ResponseJSON != "" {
		n++
		s.Source = SettleResponseJSON
		s.Path = v.jsonPath(path+".response_json", sj.ResponseJSON)
	}
	if sj.BodyBytes != "" {
		n++
		s.Source = SettleBodyBytes
		switch sj.BodyBytes {
		case "request":
			s.Bytes = BytesRequest
		case "response":
			s.Bytes = BytesResponse
		case "both":
			s.Bytes = BytesBoth
		default:
			v.failf(path+".body_bytes", "unknown value %q (want request, response or both)", sj.BodyBytes)
		}
	}
	if n != 1 {
		v.failf(path, "set exactly one of response_header, response_json and body_bytes")
	}
	switch sj.OnError {
	case "", "refund":
	case "keep":
		s.KeepOnError = true
	default:
		v.failf(path+".on_error", "unknown value %q (want refund or keep)", sj.OnError)
	}
	switch sj.OnMissing {
	case "", "max":
	case "reservation":
		s.KeepOnMissing = true
	default:
		v.failf(path+".on_missing", "unknown value %q (want max or reservation)", sj.OnMissing)
	}
	return s
}

// MissingCost is what a reservation of reserved units settles to when the answer gives no usable
// cost: the rule's max (never less than the reservation), or with on_missing "reservation" the
// reservation itself.
func (r *Rule) MissingCost(reserved int64) int64 {
	if s := r.Settle(); s == nil || s.KeepOnMissing {
		return reserved
	}
	return max(r.cost.max, reserved)
}

// UnreadCost is what a reservation of reserved units settles to when its answer went unread for
// want of memory (the VM's settle_memory, or its key's share of it, was full): the rule's max,
// never less than the reservation, whatever on_missing says. on_missing is for answers that carry
// no usage; an answer that was not read may carry any, so a full settle memory never makes usage
// unbounded.
func (r *Rule) UnreadCost(reserved int64) int64 { return max(r.cost.max, reserved) }

// jsonPath compiles a dotted path of object member names.
func (v *validator) jsonPath(path, s string) []string {
	segs := strings.Split(s, ".")
	if len(segs) > maxJSONPath {
		v.failf(path, "%q has %d segments: at most %d are allowed", s, len(segs), maxJSONPath)
	}
	for _, seg := range segs {
		if seg == "" || len(seg) > maxNameLen {
			v.failf(path, "%q is not a dotted path of member names (each 1 to %d bytes)", s, maxNameLen)
			break
		}
	}
	return segs
}

// checkSettle rejects what a settling rule cannot do: take a global lease (the lease's batch is not
// one request's reservation), or use a limit whose state cannot take a refund. Every scope settles:
// a global rule through the service, a rule of both scopes in both (two reservations), and either
// may reserve from the request body (the filter then calls the service once the body is read).
func (v *validator) checkSettle(path string, r *Rule) {
	if r.cost.reserve == nil {
		return
	}
	if r.lease != nil {
		v.failf(path+".cost", "a cost that reserves and settles cannot use a global lease (the lease's batch is not one request's reservation)")
	}
	for _, set := range r.sets {
		for j := range set.Limits {
			set.Limits[j].ContentBytes = r.countsBytes()
		}
		for j, l := range set.Limits {
			if !l.Limit.Kind.Settles() {
				v.failf(path+".cost", "a cost that settles needs token_bucket, leaky_bucket or fixed_window limits: limit %q (%d of its set) is %s", l.Name, j, l.Limit.Kind)
			}
		}
	}
}
