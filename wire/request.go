package wire

import (
	"strconv"
	"time"

	"github.com/meshlimit/meshlimit/algorithms"
)

// Descriptor is one limit of a check: charge Cost units to Key under Limit; or, when Permit
// is set (algorithm "concurrency"), acquire the permit Permit of Key, of which at most
// Limit.Quota may be held at once, for Lease (Limit.Kind is then 0 and Cost 1).
type Descriptor struct {
	Key    string
	Limit  algorithms.Limit
	Cost   int64
	Permit string
	Lease  time.Duration
}

// Request is a decoded, validated check request.
type Request struct {
	Descriptors []Descriptor
	// Renew lists held permits whose lease to extend; Release, permits to give back.
	Renew, Release []PermitRef
	// Settle lists costs to settle after the fact (settle.go): refunds and over-runs of
	// earlier reservations, applied without a decision.
	Settle []Settle
	// NowUs is the decision time in unix microseconds when HasNow is set: accepted only from
	// callers allowed to give the time (tests and replays); production uses the store's clock.
	NowUs  int64
	HasNow bool
}

// AppendRequestStart appends the start of a check request; AppendDescriptor then appends
// each descriptor and AppendRequestEnd closes the request.
func AppendRequestStart(b []byte) []byte { return append(b, `{"descriptors":[`...) }

// AppendRequestEnd appends the end of a check request.
func AppendRequestEnd(b []byte) []byte { return append(b, "]}"...) }

// AppendDescriptor appends descriptor i (0 for the first) of a check request: key k, limit l
// and cost. l's Window is sent in whole milliseconds (the configuration allows no finer
// window), a calendar window's unit and offset (in minutes) instead; the caller keeps l valid and
// cost between 1 and algorithms.MaxQuota.
func AppendDescriptor(b []byte, i int, k Key, l algorithms.Limit, cost int64) []byte {
	b = appendKeyAndLimit(b, i, k, l)
	b = append(b, `,"cost":`...)
	b = strconv.AppendInt(b, cost, 10)
	return append(b, '}')
}

// appendKeyAndLimit appends the start of list entry i, an object with key k and the members of l,
// left open for the members that follow.
func appendKeyAndLimit(b []byte, i int, k Key, l algorithms.Limit) []byte {
	if i > 0 {
		b = append(b, ',')
	}
	b = append(b, `{"key":"`...)
	b = appendKey(b, k)
	b = append(b, `","algorithm":"`...)
	b = append(b, l.Kind.String()...)
	b = append(b, `","quota":`...)
	b = strconv.AppendInt(b, l.Quota, 10)
	if c := l.Calendar; c.Unit != 0 {
		b = append(b, `,"calendar":"`...)
		b = append(b, c.Unit.String()...)
		b = append(b, '"')
		if c.Offset != 0 {
			b = append(b, `,"calendar_offset_min":`...)
			b = strconv.AppendInt(b, int64(c.Offset/time.Minute), 10)
		}
	} else {
		b = append(b, `,"window_ms":`...)
		b = strconv.AppendInt(b, int64(l.Window/time.Millisecond), 10)
	}
	if l.Burst != 0 {
		b = append(b, `,"burst":`...)
		b = strconv.AppendInt(b, l.Burst, 10)
	}
	return b
}

// DecodeOptions bounds what DecodeRequest accepts. Zero fields take the defaults.
type DecodeOptions struct {
	MaxDescriptors  int  // default and upper bound MaxDescriptors
	MaxKeyBytes     int  // default and upper bound MaxKeyBytes
	AllowClientTime bool // accept now_us
}

func (o DecodeOptions) withDefaults() DecodeOptions {
	if o.MaxDescriptors <= 0 || o.MaxDescriptors > MaxDescriptors {
		o.MaxDescriptors = MaxDescriptors
	}
	if o.MaxKeyBytes <= 0 || o.MaxKeyBytes > MaxKeyBytes {
		o.MaxKeyBytes = MaxKeyBytes
	}
	return o
}

// FieldError reports a check request that cannot be accepted. Field is the JSON path of the
// offending value ("descriptors[2].quota"), or "body" for the document as a whole.
type FieldError struct {
	Field  string
	Reason string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Reason }

// loc is where a value sits in a request, for errors: a top-level member (desc < 0) or a
// member of element desc of an array; field "" is the object itself.
type loc struct {
	desc  int
	arr   string // the array of desc: "" for descriptors (a request), "decisions" (an answer)
	field string
}

func (l loc) path() string {
	if l.desc < 0 {
		if l.field == "" {
			return "body"
		}
		return l.field
	}
	arr := l.arr
	if arr == "" {
		arr = "descriptors"
	}
	p := arr + "[" + strconv.Itoa(l.desc) + "]"
	if l.field != "" {
		p += "." + l.field
	}
	return p
}

// err returns an error about the value at l, or (name) about a member name of the object at l.
func (l loc) err(name bool, reason string) *FieldError {
	if name {
		reason = "a member name: " + reason
	}
	return &FieldError{Field: l.path(), Reason: reason}
}

// fieldName is a member name as it may appear in a path: as is when it is plain, quoted
// otherwise.
func fieldName(name []byte) string {
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return strconv.Quote(string(name))
		}
	}
	if len(name) == 0 {
		return `""`
	}
	return string(name)
}
