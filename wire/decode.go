package wire

import (
	"strconv"
	"time"

	"github.com/meshlimit/meshlimit/algorithms"
)

// DecodeRequest decodes and validates a /v1/check body into req, reusing req.Descriptors.
// Every error it returns is a *FieldError naming the JSON path of the offending value.
//
// Decoding is strict, as service/API.md says: member names match exactly (case-sensitive),
// a member given twice, an unknown member, a value of the wrong type, a number with a fraction
// or an exponent, trailing data after the object, strings that are not valid UTF-8 (raw bytes
// or overlong forms) or hold a lone surrogate escape, and values out of range are refused.
func DecodeRequest(body []byte, opts DecodeOptions, req *Request) error {
	opts = opts.withDefaults()
	clear(req.Descriptors)
	clear(req.Renew)
	clear(req.Release)
	clear(req.Settle)
	req.Settle = req.Settle[:0]
	req.Descriptors, req.NowUs, req.HasNow = req.Descriptors[:0], 0, false
	req.Renew, req.Release = req.Renew[:0], req.Release[:0]
	d := requestDecoder{scanner: scanner{b: body}, opts: opts}
	if err := d.request(req); err != nil {
		return err
	}
	return nil
}

type requestDecoder struct {
	scanner
	opts DecodeOptions
}

func (d *requestDecoder) request(req *Request) *FieldError {
	if d.space(); d.i == len(d.b) {
		return &FieldError{Field: "body", Reason: "empty; want a JSON object"}
	}
	var seenDescriptors, seenRenew, seenRelease, seenSettle bool
	err := d.document(func(name []byte) *FieldError {
		switch string(name) {
		case "descriptors":
			if seenDescriptors {
				return &FieldError{Field: "descriptors", Reason: "given twice"}
			}
			seenDescriptors = true
			return d.descriptors(req)
		case "renew", "release":
			seen, list := &seenRenew, &req.Renew
			if name[2] == 'l' {
				seen, list = &seenRelease, &req.Release
			}
			if *seen {
				return &FieldError{Field: string(name), Reason: "given twice"}
			}
			*seen = true
			return d.permitList(string(name), list)
		case "settle":
			if seenSettle {
				return &FieldError{Field: "settle", Reason: "given twice"}
			}
			seenSettle = true
			return d.settleList(req)
		case "now_us":
			at := loc{desc: -1, field: "now_us"}
			if req.HasNow {
				return at.err(false, "given twice")
			}
			var err *FieldError
			req.NowUs, err = d.integer(at)
			req.HasNow = err == nil
			return err
		}
		return &FieldError{Field: fieldName(name), Reason: "unknown field"}
	})
	if err != nil {
		return err
	}
	return d.check(req)
}

// check validates what the request holds besides each descriptor.
func (d *requestDecoder) check(req *Request) *FieldError {
	if req.HasNow {
		if !d.opts.AllowClientTime {
			return &FieldError{Field: "now_us", Reason: "not accepted: the service uses its store's clock (client time is for tests)"}
		}
		if req.NowUs < 0 || req.NowUs > MaxTimeUs {
			return &FieldError{Field: "now_us", Reason: "must be between 0 and " + strconv.FormatInt(MaxTimeUs, 10)}
		}
	}
	if len(req.Descriptors) == 0 && len(req.Renew) == 0 && len(req.Release) == 0 && len(req.Settle) == 0 {
		return &FieldError{Field: "descriptors", Reason: "at least one descriptor is required (or a renew, release or settle entry)"}
	}
	return nil
}

func (d *requestDecoder) descriptors(req *Request) *FieldError {
	return d.array(loc{desc: -1, field: "descriptors"}, d.opts.MaxDescriptors, "descriptors", func(i int) *FieldError {
		req.Descriptors = append(req.Descriptors, Descriptor{})
		return d.descriptor(i, &req.Descriptors[i])
	})
}

// The members of a descriptor, as bits of a seen set.
const (
	fKey = 1 << iota
	fAlgorithm
	fQuota
	fWindow
	fBurst
	fCost
	fPermit
	fLease
	fCalendar
	fCalendarOffset
)

// descriptor decodes and validates descriptor i into out.
func (d *requestDecoder) descriptor(i int, out *Descriptor) *FieldError {
	var seen int
	var x extras
	out.Cost = 1
	err := d.object(loc{desc: i}, "an object", func(name []byte) *FieldError {
		bit, field := descriptorField(name)
		at := loc{desc: i, field: field}
		switch {
		case bit == 0:
			return loc{desc: i, field: fieldName(name)}.err(false, "unknown field")
		case seen&bit != 0:
			return at.err(false, "given twice")
		}
		seen |= bit
		return d.descriptorValue(bit, at, out, &x)
	})
	if err != nil {
		return err
	}
	if x.concurrency {
		return validatePermit(i, seen, out, x.leaseMs, d.opts.MaxKeyBytes)
	}
	if seen&(fPermit|fLease) != 0 {
		f := "permit"
		if seen&fPermit == 0 {
			f = "lease_ms"
		}
		return loc{desc: i, field: f}.err(false, "only for algorithm concurrency")
	}
	return validate(loc{desc: i}, seen, out, x.windowMs, d.opts.MaxKeyBytes)
}

// descriptorField returns the seen bit and the name of a descriptor member, or 0.
func descriptorField(name []byte) (int, string) {
	switch string(name) {
	case "key":
		return fKey, "key"
	case "algorithm":
		return fAlgorithm, "algorithm"
	case "quota":
		return fQuota, "quota"
	case "window_ms":
		return fWindow, "window_ms"
	case "burst":
		return fBurst, "burst"
	case "cost":
		return fCost, "cost"
	case "permit":
		return fPermit, "permit"
	case "lease_ms":
		return fLease, "lease_ms"
	case "calendar":
		return fCalendar, "calendar"
	case "calendar_offset_min":
		return fCalendarOffset, "calendar_offset_min"
	}
	return 0, ""
}

// extras are the members of a descriptor decoded apart from it: the window and the lease in
// milliseconds, and whether the algorithm is concurrency.
type extras struct {
	windowMs, leaseMs int64
	concurrency       bool
}

// descriptorValue decodes the value of member bit into out (window_ms, lease_ms and a
// concurrency algorithm into x).
func (d *requestDecoder) descriptorValue(bit int, at loc, out *Descriptor, x *extras) *FieldError {
	var err *FieldError
	switch bit {
	case fPermit:
		out.Permit, err = d.permitID(at)
	case fLease:
		x.leaseMs, err = d.integer(at)
	case fCalendar:
		return d.calendar(at, out)
	case fCalendarOffset:
		var m int64
		m, err = d.integer(at)
		out.Limit.Calendar.Offset = time.Duration(m) * time.Minute
		if err == nil && (m < -maxOffsetMin || m > maxOffsetMin) {
			err = at.err(false, between(-maxOffsetMin, maxOffsetMin, m))
		}
	case fKey, fAlgorithm:
		if d.peek() != '"' {
			return d.wrongType(at, "a string")
		}
		var v []byte
		if v, err = d.str(at, false); err != nil {
			return err
		}
		if bit == fKey {
			out.Key = string(v)
			return nil
		}
		out.Limit.Kind = 0
		if x.concurrency = string(v) == Concurrency; x.concurrency {
			return nil
		}
		for _, k := range algorithms.Kinds { // not ParseKind: comparing does not allocate
			if k.String() == string(v) {
				out.Limit.Kind = k
			}
		}
		if out.Limit.Kind == 0 {
			return at.err(false, "unknown algorithm "+strconv.Quote(string(v))+" (want token_bucket, leaky_bucket, fixed_window, sliding_log, sliding_window or concurrency)")
		}
	case fQuota:
		out.Limit.Quota, err = d.integer(at)
	case fWindow:
		x.windowMs, err = d.integer(at)
	case fBurst:
		out.Limit.Burst, err = d.integer(at)
	case fCost:
		out.Cost, err = d.integer(at)
	}
	return err
}

// validate checks the descriptor at here (an element of descriptors, or of settle) against the
// bounds of service/API.md, which are those of package algorithms, and sets its Window.
func validate(here loc, seen int, out *Descriptor, windowMs int64, maxKeyBytes int) *FieldError {
	at := func(field string) loc { here.field = field; return here }
	if seen&fKey == 0 {
		return at("key").err(false, "required")
	}
	if err := CheckKey(out.Key, maxKeyBytes); err != nil {
		return at("key").err(false, err.Error())
	}
	if seen&fAlgorithm == 0 {
		return at("algorithm").err(false, "required (token_bucket, leaky_bucket, fixed_window, sliding_log, sliding_window or concurrency)")
	}
	l := &out.Limit
	if maxQuota := l.Kind.MaxQuota(); l.Quota < 1 || l.Quota > maxQuota {
		return at("quota").err(false, between(1, maxQuota, l.Quota)+" for "+l.Kind.String())
	}
	if err := validateWindow(at, seen, l, windowMs); err != nil {
		return err
	}
	if !l.Kind.TakesBurst() && l.Burst != 0 {
		return at("burst").err(false, "must be 0 or absent for "+l.Kind.String()+", got "+strconv.FormatInt(l.Burst, 10))
	}
	if l.Burst < 0 || l.Burst > algorithms.MaxQuota {
		return at("burst").err(false, between(0, algorithms.MaxQuota, l.Burst))
	}
	if out.Cost < 1 || out.Cost > algorithms.MaxQuota {
		return at("cost").err(false, between(1, algorithms.MaxQuota, out.Cost))
	}
	if err := l.Validate(); err != nil { // what the per-field checks cannot see: burst × window / quota
		reason := err.Error()
		if len(reason) > len("algorithms: ") && reason[:len("algorithms: ")] == "algorithms: " {
			reason = reason[len("algorithms: "):]
		}
		return at("").err(false, reason)
	}
	return nil
}

func between(lo, hi, got int64) string {
	return "must be between " + strconv.FormatInt(lo, 10) + " and " + strconv.FormatInt(hi, 10) + ", got " + strconv.FormatInt(got, 10)
}

// maxOffsetMin bounds calendar_offset_min: algorithms.MaxCalendarOffset in minutes.
const maxOffsetMin = int64(algorithms.MaxCalendarOffset / time.Minute)

// calendar decodes a descriptor's calendar member, a unit name, into out's limit.
func (d *requestDecoder) calendar(at loc, out *Descriptor) *FieldError {
	if d.peek() != '"' {
		return d.wrongType(at, "a string")
	}
	v, err := d.str(at, false)
	if err != nil {
		return err
	}
	for _, u := range algorithms.CalendarUnits { // not ParseCalendarUnit: comparing does not allocate
		if u.String() == string(v) {
			out.Limit.Calendar.Unit = u
			return nil
		}
	}
	return at.err(false, "unknown calendar unit "+strconv.Quote(string(v))+" (want day, week, month or year)")
}

// validateWindow checks a descriptor's window and sets l.Window: window_ms in range, or, for a
// calendar window (calendar given), no window_ms (or 0); a calendar_offset_min needs a calendar.
func validateWindow(at func(string) loc, seen int, l *algorithms.Limit, windowMs int64) *FieldError {
	if seen&fCalendar != 0 {
		if windowMs != 0 {
			return at("window_ms").err(false, "must be 0 or absent with a calendar (the period is the window), got "+strconv.FormatInt(windowMs, 10))
		}
		if l.Kind != algorithms.FixedWindow {
			return at("calendar").err(false, "only fixed_window counts calendar periods, not "+l.Kind.String())
		}
		return nil
	}
	if seen&fCalendarOffset != 0 {
		return at("calendar_offset_min").err(false, "only with a calendar")
	}
	minMs, maxMs := int64(algorithms.MinWindow/time.Millisecond), int64(algorithms.MaxWindow/time.Millisecond)
	if windowMs < minMs || windowMs > maxMs {
		return at("window_ms").err(false, between(minMs, maxMs, windowMs))
	}
	l.Window = time.Duration(windowMs) * time.Millisecond
	return nil
}
