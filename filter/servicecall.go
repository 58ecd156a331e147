package filter

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/meshlimit/meshlimit/algorithms"
	"github.com/meshlimit/meshlimit/internal/fnv"
	"github.com/meshlimit/meshlimit/rules"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm"
)

// The /v1/check call: the request body the filter sends and the answer it reads (service/API.md).

// checkDecision is one decision of the service's answer (service/API.md).
type checkDecision struct {
	Allowed      bool  `json:"allowed"`
	Limit        int64 `json:"limit"`
	Remaining    int64 `json:"remaining"`
	ResetMs      int64 `json:"reset_ms"`
	RetryAfterMs int64 `json:"retry_after_ms"` // -1: never (the cost exceeds the capacity)
	DelayMs      int64 `json:"delay_ms"`
	Skipped      bool  `json:"skipped"`
}

func (d *checkDecision) decision() (out algorithms.Decision) {
	out.Allowed, out.Limit, out.Remaining = d.Allowed, d.Limit, max(d.Remaining, 0)
	out.Reset = time.Duration(d.ResetMs) * time.Millisecond
	switch {
	case d.RetryAfterMs < 0:
		out.RetryAfter = algorithms.RetryNever
	case !d.Allowed:
		out.RetryAfter = time.Duration(d.RetryAfterMs) * time.Millisecond
	}
	return out
}

func cachedDenial(spec *rules.LimitSpec, wait int64) (d algorithms.Decision) {
	d.Limit = spec.Limit.Quota
	d.RetryAfter = time.Duration(wait)
	d.Reset = time.Duration(wait)
	return d
}

type checkResponse struct {
	Allowed   bool            `json:"allowed"`
	Decisions []checkDecision `json:"decisions"`
}

// readCheckResponse reads the service's answer in an http-call callback. Anything but a 200 with a
// well-formed body of n decisions is a failure: a timeout (Envoy answers 504), no healthy upstream
// (503), an error of the service (503 when its store is down), a reset (no headers at all).
func readCheckResponse(numHeaders, bodySize, n int) ([]checkDecision, error) {
	if numHeaders == 0 {
		return nil, errors.New("the call failed (reset)")
	}
	headers, err := proxywasm.GetHttpCallResponseHeaders()
	if err != nil {
		return nil, fmt.Errorf("reading the headers: %w", err)
	}
	status := ""
	for _, h := range headers {
		if h[0] == ":status" {
			status = h[1]
		}
	}
	if status != "200" {
		return nil, newStatusError(status, bodySize)
	}
	if bodySize == 0 || bodySize > maxCheckResponse {
		return nil, fmt.Errorf("body of %d bytes", bodySize)
	}
	body, err := proxywasm.GetHttpCallResponseBody(0, bodySize)
	if err != nil {
		return nil, fmt.Errorf("reading the body: %w", err)
	}
	var r checkResponse
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("decoding the body: %w", err)
	}
	if len(r.Decisions) != n {
		return nil, fmt.Errorf("%d decisions for %d descriptors", len(r.Decisions), n)
	}
	return r.Decisions, nil
}

const maxCheckResponse = 1 << 20

// statusError is an answer other than 200. A 4xx is the service refusing the check (a request it
// cannot accept, e.g. beyond its bounds): not an outage, see rejected.
type statusError struct {
	status string
	body   string // the start of a 4xx answer's body, which names what the service refused
}

func newStatusError(status string, bodySize int) *statusError {
	e := &statusError{status: status}
	if e.rejected() && bodySize > 0 {
		if b, err := proxywasm.GetHttpCallResponseBody(0, min(bodySize, 256)); err == nil {
			e.body = string(b)
		}
	}
	return e
}

func (e *statusError) Error() string {
	if e.body != "" {
		return "status " + e.status + ": " + e.body
	}
	return "status " + e.status
}

// rejected reports whether the service refused the check (a 4xx answer).
func (e *statusError) rejected() bool { return len(e.status) == 3 && e.status[0] == '4' }

// descriptorCount counts the descriptors items send: one per limit.
func descriptorCount(items []globalItem) int {
	n := 0
	for i := range items {
		n += len(items[i].spec)
	}
	return n
}

// appendCheckBody appends the /v1/check request for items: one descriptor per limit, keyed by plugin,
// rule, limit fingerprint and key value, so that different plugins, rules and limit definitions never
// share a counter in the service.
func appendCheckBody(b []byte, plugin string, items []globalItem) []byte {
	b = append(b, `{"descriptors":[`...)
	first := true
	for i := range items {
		it := &items[i]
		for k := range it.spec {
			spec := &it.spec[k]
			if !first {
				b = append(b, ',')
			}
			first = false
			b = append(b, `{"key":"`...)
			b = appendJSONString(b, plugin)
			b = append(b, '/')
			b = appendJSONString(b, it.rs.rule.Name)
			b = append(b, '/')
			b = strconv.AppendUint(b, spec.Fingerprint, 36)
			b = append(b, '/')
			b = appendServiceKey(b, it.key)
			b = append(b, `","algorithm":"`...)
			b = append(b, spec.Limit.Kind.String()...)
			b = append(b, `","quota":`...)
			b = strconv.AppendInt(b, spec.Limit.Quota, 10)
			b = append(b, `,"window_ms":`...)
			b = strconv.AppendInt(b, int64(spec.Limit.Window/time.Millisecond), 10)
			if spec.Limit.Burst != 0 {
				b = append(b, `,"burst":`...)
				b = strconv.AppendInt(b, spec.Limit.Burst, 10)
			}
			b = append(b, `,"cost":`...)
			b = strconv.AppendInt(b, it.cost, 10)
			b = append(b, '}')
		}
	}
	return append(b, "]}"...)
}

// maxServiceKeyValue bounds the key value part of a descriptor key; the service accepts 512 bytes.
const maxServiceKeyValue = 256

// appendServiceKey appends a key value the service accepts: as is when it is short, valid UTF-8
// without control characters; otherwise "#" and two FNV-64a hashes in hex, which keep distinct values
// apart.
func appendServiceKey(b []byte, v string) []byte {
	clean := len(v) <= maxServiceKeyValue && utf8.ValidString(v)
	for i := 0; clean && i < len(v); i++ {
		clean = v[i] >= 0x20 && v[i] != 0x7f
	}
	if clean {
		return appendJSONString(b, v)
	}
	b = append(b, '#')
	b = strconv.AppendUint(b, fnv.String(v), 16)
	b = append(b, '-')
	return strconv.AppendUint(b, fnv.String(v+"\x00"), 16)
}

// appendJSONString appends s, which has no control characters, escaped for a JSON string.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == '"' || c == '\\' {
			b = append(b, '\\')
		}
		b = append(b, s[i])
	}
	return b
}
