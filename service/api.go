package service

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/meshlimit/meshlimit/algorithms"
)

// CheckRequest is the JSON body of POST /v1/check (see API.md).
type CheckRequest struct {
	Descriptors []DescriptorRequest `json:"descriptors"`
	// NowUs is the decision time in unix microseconds. It is accepted only when the service
	// runs with client time allowed (tests and replays); production uses the store's clock.
	NowUs *int64 `json:"now_us,omitempty"`
}

// DescriptorRequest is one descriptor of a CheckRequest.
type DescriptorRequest struct {
	Key       string `json:"key"`
	Algorithm string `json:"algorithm"`
	Quota     int64  `json:"quota"`
	WindowMs  int64  `json:"window_ms"`
	Burst     int64  `json:"burst,omitempty"`
	Cost      *int64 `json:"cost,omitempty"` // default 1
}

// ParseOptions bounds what ParseCheckRequest accepts. Zero fields take the defaults.
type ParseOptions struct {
	MaxDescriptors  int  // default 64
	MaxKeyBytes     int  // default 512
	AllowClientTime bool // accept now_us
}

const (
	defaultMaxDescriptors = 64
	defaultMaxKeyBytes    = 512
	defaultMaxBodyBytes   = 64 << 10
)

func (opts ParseOptions) withDefaults() ParseOptions {
	if opts.MaxDescriptors <= 0 {
		opts.MaxDescriptors = defaultMaxDescriptors
	}
	if opts.MaxKeyBytes <= 0 {
		opts.MaxKeyBytes = defaultMaxKeyBytes
	}
	return opts
}

// Check is a validated check request.
type Check struct {
	Descriptors []Descriptor
	Now         time.Time // zero: the store's clock
}

// RequestError reports a check request that cannot be accepted. Field is the JSON path of the
// offending value ("descriptors[2].quota"), or "body" for the document as a whole.
type RequestError struct {
	Field  string
	Reason string
}

func (e *RequestError) Error() string { return e.Field + ": " + e.Reason }

func reqErr(field, format string, args ...any) *RequestError {
	return &RequestError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// ParseCheckRequest decodes and validates a /v1/check body. Decoding is strict: unknown
// fields, trailing data, values of the wrong type and out-of-range limits are rejected. Every
// error it returns is a *RequestError, except errors from reading body (such as
// *http.MaxBytesError), which are returned unchanged.
func ParseCheckRequest(body io.Reader, opts ParseOptions) (Check, error) {
	opts = opts.withDefaults()
	var req CheckRequest
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return Check{}, decodeError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		if err == nil || isSyntax(err) {
			return Check{}, reqErr("body", "trailing data after the JSON object")
		}
		return Check{}, decodeError(err)
	}

	return req.check(opts, nil)
}

// check validates a decoded request (opts with defaults applied), appending its descriptors
// to dst[:0].
func (req *CheckRequest) check(opts ParseOptions, dst []Descriptor) (Check, error) {
	var c Check
	if req.NowUs != nil {
		if !opts.AllowClientTime {
			return Check{}, reqErr("now_us", "not accepted: the service uses its store's clock (client time is for tests)")
		}
		if *req.NowUs < 0 || *req.NowUs > maxTimeUs {
			return Check{}, reqErr("now_us", "must be between 0 and %d", int64(maxTimeUs))
		}
		c.Now = time.UnixMicro(*req.NowUs)
	}
	switch n := len(req.Descriptors); {
	case n == 0:
		return Check{}, reqErr("descriptors", "at least one descriptor is required")
	case n > opts.MaxDescriptors:
		return Check{}, reqErr("descriptors", "%d descriptors, at most %d allowed", n, opts.MaxDescriptors)
	}
	c.Descriptors = slices.Grow(dst[:0], len(req.Descriptors))[:len(req.Descriptors)]
	for i := range req.Descriptors {
		var err error
		if c.Descriptors[i], err = req.Descriptors[i].descriptor(i, opts); err != nil {
			return Check{}, err
		}
	}
	return c, nil
}

// descriptor validates d, descriptor i of its request.
func (d *DescriptorRequest) descriptor(i int, opts ParseOptions) (Descriptor, error) {
	if err := d.validate(opts); err != nil {
		err.Field = "descriptors[" + strconv.Itoa(i) + "]" + err.Field
		return Descriptor{}, err
	}
	kind, _ := algorithms.ParseKind(d.Algorithm)
	cost := int64(1)
	if d.Cost != nil {
		cost = *d.Cost
	}
	return Descriptor{Key: d.Key, Limit: algorithms.Limit{Kind: kind, Quota: d.Quota, Window: time.Duration(d.WindowMs) * time.Millisecond, Burst: d.Burst}, Cost: cost}, nil
}

// validate reports what is wrong with d; the error's Field is relative to the descriptor
// (".quota", or "" for the descriptor as a whole).
func (d *DescriptorRequest) validate(opts ParseOptions) *RequestError {
	if err := checkKey(d.Key, opts.MaxKeyBytes); err != nil {
		return reqErr(".key", "%s", err)
	}
	if d.Algorithm == "" {
		return reqErr(".algorithm", "required (token_bucket, leaky_bucket, fixed_window, sliding_log or sliding_window)")
	}
	kind, err := algorithms.ParseKind(d.Algorithm)
	if err != nil {
		return reqErr(".algorithm", "%s", strings.TrimPrefix(err.Error(), "algorithms: "))
	}
	maxQuota := algorithms.MaxQuota
	if kind == algorithms.SlidingLog {
		maxQuota = algorithms.MaxLogQuota
	}
	if d.Quota < 1 || d.Quota > maxQuota {
		return reqErr(".quota", "must be between 1 and %d for %v, got %d", maxQuota, kind, d.Quota)
	}
	minMs, maxMs := int64(algorithms.MinWindow/time.Millisecond), int64(algorithms.MaxWindow/time.Millisecond)
	if d.WindowMs < minMs || d.WindowMs > maxMs {
		return reqErr(".window_ms", "must be between %d and %d, got %d", minMs, maxMs, d.WindowMs)
	}
	bucket := kind == algorithms.TokenBucket || kind == algorithms.LeakyBucket
	if !bucket && d.Burst != 0 {
		return reqErr(".burst", "must be 0 or absent for %v, got %d", kind, d.Burst)
	}
	if d.Burst < 0 || d.Burst > algorithms.MaxQuota {
		return reqErr(".burst", "must be between 0 and %d, got %d", algorithms.MaxQuota, d.Burst)
	}
	if d.Cost != nil {
		if cost := *d.Cost; cost < 1 || cost > algorithms.MaxQuota {
			return reqErr(".cost", "must be between 1 and %d, got %d", algorithms.MaxQuota, cost)
		}
	}
	l := algorithms.Limit{Kind: kind, Quota: d.Quota, Window: time.Duration(d.WindowMs) * time.Millisecond, Burst: d.Burst}
	if err := l.Validate(); err != nil { // what the per-field checks cannot see: burst × window / quota
		return reqErr("", "%s", strings.TrimPrefix(err.Error(), "algorithms: "))
	}
	return nil
}

// checkKey accepts 1 to max bytes of UTF-8 without control characters.
func checkKey(k string, max int) error {
	switch {
	case k == "":
		return errors.New("required")
	case len(k) > max:
		return fmt.Errorf("%d bytes, at most %d allowed", len(k), max)
	case !utf8.ValidString(k):
		return errors.New("not valid UTF-8")
	case strings.IndexFunc(k, unicode.IsControl) >= 0:
		return errors.New("contains a control character")
	}
	return nil
}

func isSyntax(err error) bool {
	var se *json.SyntaxError
	return errors.As(err, &se) || errors.Is(err, io.ErrUnexpectedEOF)
}

// decodeError turns a json decoding error into a *RequestError naming the field, or returns
// a read error unchanged.
func decodeError(err error) error {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.Is(err, io.EOF):
		return reqErr("body", "empty; want a JSON object")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return reqErr("body", "truncated JSON")
	case errors.As(err, &se):
		return reqErr("body", "invalid JSON at offset %d: %s", se.Offset, se.Error())
	case errors.As(err, &te):
		field := te.Field
		if field == "" {
			field = "body"
		}
		return reqErr(field, "want %s, got JSON %s", jsonTypeName(te.Type.Kind().String()), te.Value)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		quoted := strings.TrimPrefix(err.Error(), "json: unknown field ")
		if name, err := strconv.Unquote(quoted); err == nil && name != "" {
			quoted = name
		}
		return reqErr(quoted, "unknown field")
	case strings.HasPrefix(err.Error(), "json: "):
		return reqErr("body", "%s", strings.TrimPrefix(err.Error(), "json: "))
	}
	return err
}

func jsonTypeName(goKind string) string {
	switch goKind {
	case "int64", "int", "uint64":
		return "an integer"
	case "string":
		return "a string"
	case "slice":
		return "an array"
	case "struct", "ptr":
		return "an object"
	}
	return goKind
}

// appendCheckResponse appends the JSON answer to a decided check (see API.md).
func appendCheckResponse(b []byte, o Outcome) []byte {
	b = append(b, `{"allowed":`...)
	b = strconv.AppendBool(b, o.Allowed)
	b = append(b, `,"decisions":[`...)
	for i, d := range o.Decisions {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"allowed":`...)
		b = strconv.AppendBool(b, d.Allowed)
		b = append(b, `,"limit":`...)
		b = strconv.AppendInt(b, d.Limit, 10)
		b = append(b, `,"remaining":`...)
		b = strconv.AppendInt(b, d.Remaining, 10)
		b = append(b, `,"reset_ms":`...)
		b = strconv.AppendInt(b, ceilMs(d.Reset), 10)
		b = append(b, `,"retry_after_ms":`...)
		if d.RetryAfter == algorithms.RetryNever {
			b = append(b, "-1"...)
		} else {
			b = strconv.AppendInt(b, ceilMs(d.RetryAfter), 10)
		}
		if d.Delay > 0 {
			b = append(b, `,"delay_ms":`...)
			b = strconv.AppendInt(b, ceilMs(d.Delay), 10)
		}
		if d.Skipped {
			b = append(b, `,"skipped":true`...)
		}
		b = append(b, '}')
	}
	return append(b, "]}\n"...)
}

// ceilMs rounds a non-negative duration up to whole milliseconds, so that a client waiting
// that long is never early.
func ceilMs(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// appendError appends the JSON error body {"error": msg}.
func appendError(b []byte, msg string) []byte {
	q, _ := json.Marshal(msg)
	b = append(b, `{"error":`...)
	b = append(b, q...)
	return append(b, "}\n"...)
}
