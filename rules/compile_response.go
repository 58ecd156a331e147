package rules

import (
	"encoding/binary"
	"encoding/json"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/meshlimit/meshlimit/internal/sha256"
)

// response compiles the response object.
func (v *validator) response(rj *responseJSON) *Response {
	r := &Response{Status: defaultStatus, QuotaHeadersOnAllowed: true, dialects: dialects[:1]}
	if rj.Status.Set {
		if s := rj.Status.Value; s < 400 || s > 599 {
			v.failf("response.status", "%d out of range: want 400 to 599", s)
		} else {
			r.Status = uint32(s)
		}
	}
	if rj.QuotaHeadersOnAllowed != nil {
		r.QuotaHeadersOnAllowed = *rj.QuotaHeadersOnAllowed
	}
	if rj.RateLimitHeaders != nil {
		r.dialects = v.headerSets(rj.RateLimitHeaders)
	}
	if rj.RetryAfterJitter != "" { // the optional sections' validators only when set (see rule)
		r.RetryAfterJitter, r.jitterSecond = v.jitter("response.retry_after_jitter", rj.RetryAfterJitter)
	}
	if rj.EffectiveWindowJitter != "" {
		r.WindowJitter, r.windowSecond = v.jitter("response.effective_window_jitter", rj.EffectiveWindowJitter)
	}
	v.body(rj, r)
	if len(rj.Headers) > 0 {
		r.extra = v.extraHeaders(rj.Headers)
	}
	if h := rj.ExplainHeader; h != "" {
		if !isToken(h) {
			v.failf("response.explain_header", "%q is not a valid header name", h)
		}
		r.ExplainHeader = strings.ToLower(h)
	}
	if rj.PartitionKey || rj.PartitionKeySecret != "" {
		v.partitionKey(rj, r) // the SipHash key is read only with partition_key on (Partition)
	}
	return r
}

// partitionKey compiles response.partition_key and partition_key_secret into the SipHash key.
func (v *validator) partitionKey(rj *responseJSON, r *Response) {
	secret := rj.PartitionKeySecret
	switch n := len(secret); {
	case secret != "" && !rj.PartitionKey:
		v.failf("response.partition_key_secret", "is set but response.partition_key is not true")
	case secret != "" && (n < minPKSecret || n > maxPKSecret):
		v.failf("response.partition_key_secret", "%d bytes: want %d to %d", n, minPKSecret, maxPKSecret)
	}
	r.partitionKey = rj.PartitionKey
	sum := sha256.Sum256([]byte("meshlimit-pk-v1\x00" + secret))
	r.pkKey = [2]uint64{binary.LittleEndian.Uint64(sum[:8]), binary.LittleEndian.Uint64(sum[8:16])}
}

// headerSets compiles response.rate_limit_headers into the enabled dialects, in the order of the
// table, refusing two that write the same field.
func (v *validator) headerSets(names []string) []*dialect {
	enabled := make([]bool, len(dialects))
	none := false
	for i, s := range names {
		p := "response.rate_limit_headers[" + strconv.Itoa(i) + "]"
		if s == "none" {
			none = true
			continue
		}
		j := slices.IndexFunc(dialects, func(d *dialect) bool { return d.name == s })
		switch {
		case j < 0:
			v.failf(p, "unknown header set %q (want %s)", s, dialectNames())
		case enabled[j]:
			v.failf(p, "%q is listed twice", s)
		default:
			for k, on := range enabled {
				if on && shareField(dialects[j], dialects[k]) {
					v.failf(p, "%q writes a field that %q writes too: list one of them", s, dialects[k].name)
				}
			}
			enabled[j] = true
		}
	}
	var sets []*dialect
	for j, on := range enabled {
		if on {
			sets = append(sets, dialects[j])
		}
	}
	if none && len(sets) > 0 {
		v.failf("response.rate_limit_headers", `"none" cannot be combined with other header sets`)
	}
	return sets
}

// shareField reports whether dialects a and b write a field of the same name.
func shareField(a, b *dialect) bool {
	for _, f := range a.fields {
		if slices.Contains(b.fields, f) {
			return true
		}
	}
	return false
}

// jitter compiles a jitter duration (response.retry_after_jitter or effective_window_jitter) at
// path: the duration and its whole seconds, rounded up.
func (v *validator) jitter(path, s string) (time.Duration, int64) {
	if s == "" {
		return 0, 0
	}
	d, err := parseDuration(s)
	switch {
	case err != nil:
		v.failf(path, "%v", err)
	case d > maxJitter:
		v.failf(path, "%s is above the maximum of 1h", s)
	default:
		return d, ceilSeconds(d)
	}
	return 0, 0
}

// body compiles response.body and body_format into the text, problem document and gRPC message.
func (v *validator) body(rj *responseJSON, r *Response) {
	body := defaultBody
	if rj.Body != nil {
		body = *rj.Body
		if len(body) > maxBodyLen {
			v.failf("response.body", "%d bytes: at most %d are allowed", len(body), maxBodyLen)
		}
	}
	switch rj.BodyFormat {
	case "", "text":
		r.contentType = []byte("text/plain; charset=utf-8")
		r.textBody = []byte(body)
	case "problem_json":
		r.problem = true
		r.contentType = []byte("application/problem+json")
		detail := ""
		if rj.Body != nil {
			detail = body
		}
		r.problemHead = problemHead(problemType, problemTitle, r.Status, detail)
		r.abnormalHead = problemHead(abnormalType, abnormalTitle, r.Status, detail)
		if rj.Body == nil {
			body = strings.TrimSpace(defaultBody)
		}
	default:
		v.failf("response.body_format", "unknown format %q (want text or problem_json)", rj.BodyFormat)
	}
	r.grpcMessage = []byte(strings.TrimRight(body, "\r\n"))
	if len(r.grpcMessage) == 0 {
		r.grpcMessage = []byte(strings.TrimSpace(defaultBody))
	}
}

// extraHeaders compiles response.headers, sorted by lower-case name.
func (v *validator) extraHeaders(headers map[string]string) (extra []Field) {
	if len(headers) > maxExtraHeaders {
		v.failf("response.headers", "%d headers: at most %d are allowed", len(headers), maxExtraHeaders)
	}
	for name, value := range headers {
		p := "response.headers[" + quoteInput(name) + "]"
		lower := strings.ToLower(name)
		switch {
		case len(name) > maxHeaderValue:
			v.failf(p, "name longer than %d bytes", maxHeaderValue)
			continue
		case !isToken(name):
			v.failf(p, "%q is not a valid header name", name)
			continue
		case containsString(reservedHeaders, lower):
			v.failf(p, "%q is set by the filter (see rate_limit_headers and retry_after_jitter)", lower)
			continue
		case len(value) > maxHeaderValue:
			v.failf(p, "value longer than %d bytes", maxHeaderValue)
			continue
		case strings.ContainsAny(value, "\r\n\x00"):
			v.failf(p, "value contains CR, LF or NUL")
			continue
		}
		extra = append(extra, Field{Name: lower, Value: []byte(value)})
	}
	sort.Slice(extra, func(i, j int) bool { return extra[i].Name < extra[j].Name })
	for i := 1; i < len(extra); i++ {
		if extra[i].Name == extra[i-1].Name {
			v.failf("response.headers", "%q is set twice (names are case-insensitive)", extra[i].Name)
		}
	}
	return extra
}

// problemHead renders the start of a problem document: `{"type":…,"title":…,"status":N[,"detail":…]`.
func problemHead(typ, title string, status uint32, detail string) []byte {
	t, _ := json.Marshal(typ) // strings always marshal
	head := append([]byte(`{"type":`), t...)
	t, _ = json.Marshal(title)
	head = append(append(head, `,"title":`...), t...)
	head = strconv.AppendInt(append(head, `,"status":`...), int64(status), 10)
	if detail != "" {
		t, _ = json.Marshal(detail)
		head = append(append(head, `,"detail":`...), t...)
	}
	return head
}
