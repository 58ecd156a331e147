package wire

import (
	"strconv"
	"time"

	"github.com/meshlimit/meshlimit/algorithms"
)

// Decision is one descriptor's decision in the answer to a check.
type Decision struct {
	// Allowed reports that the descriptor admitted the request (and was charged).
	Allowed bool
	// Limit is the descriptor's quota.
	Limit int64
	// Remaining is the units still available right after the decision.
	Remaining int64
	// ResetMs is the time until the full capacity is back, rounded up; 0 when nothing is used.
	ResetMs int64
	// RetryAfterMs is, when denied, the time until the same request would be admitted,
	// rounded up; -1 when never (the cost exceeds the capacity); 0 when allowed.
	RetryAfterMs int64
	// DelayMs is how long to hold an admitted request (leaky_bucket's queue), rounded up.
	DelayMs int64
	// EffectiveMs is the effective window of draft-ietf-httpapi-ratelimit-headers-11 (§4.1.2),
	// algorithms.Decision.EffectiveWindow, rounded up: the time within which no more than
	// Remaining can be used. 0 (sent as no member) when the service did not compute it; the filter
	// then derives t from the other members (algorithms.Limit.EffectiveWindowOf).
	EffectiveMs int64
	// Skipped reports that the descriptor was not evaluated (nor charged): an earlier one
	// denied the request. Only Limit is set.
	Skipped bool
	// AtUs is the store's time of the decision in unix µs (algorithms.Decision.At), sent as at_us
	// when > 0: an undo or a settle of what it admitted carries it back (Settle.AtUs), so that the
	// store applies it in the window and state that took it. 0 from a service before the member.
	AtUs int64
}

// FromAlgorithms returns the wire form of an algorithms decision (durations rounded up to
// whole milliseconds, so that a client waiting that long is never early).
func FromAlgorithms(d algorithms.Decision, skipped bool) Decision {
	w := Decision{Allowed: d.Allowed, Limit: d.Limit, Remaining: d.Remaining, ResetMs: ceilMs(d.Reset),
		DelayMs: ceilMs(d.Delay), EffectiveMs: ceilMs(d.EffectiveWindow), Skipped: skipped}
	if d.Allowed && !skipped { // what took something: what an undo or a settle may name
		w.AtUs = d.At / int64(time.Microsecond)
	}
	if d.RetryAfter == algorithms.RetryNever {
		w.RetryAfterMs = -1
	} else {
		w.RetryAfterMs = ceilMs(d.RetryAfter)
	}
	return w
}

// Algorithms returns d as an algorithms decision: what the filter renders. RetryAfter is
// RetryNever for -1 and kept only on a denial; a negative Remaining reads as 0, and so does a
// negative EffectiveMs (unknown).
func (d Decision) Algorithms() (out algorithms.Decision) {
	out.Allowed, out.Limit, out.Remaining = d.Allowed, d.Limit, max(d.Remaining, 0)
	out.Reset = time.Duration(d.ResetMs) * time.Millisecond
	out.Delay = time.Duration(max(d.DelayMs, 0)) * time.Millisecond
	out.EffectiveWindow = time.Duration(max(d.EffectiveMs, 0)) * time.Millisecond
	switch {
	case d.RetryAfterMs < 0:
		out.RetryAfter = algorithms.RetryNever
	case !d.Allowed:
		out.RetryAfter = time.Duration(d.RetryAfterMs) * time.Millisecond
	}
	return out
}

// AppendAnswerStart appends the start of an answer; AppendDecision then appends each
// decision and AppendAnswerEnd closes the answer.
func AppendAnswerStart(b []byte, allowed bool) []byte {
	b = append(b, `{"allowed":`...)
	b = strconv.AppendBool(b, allowed)
	return append(b, `,"decisions":[`...)
}

// AppendAnswerEnd appends the end of an answer, with a newline.
func AppendAnswerEnd(b []byte) []byte { return append(b, "]}\n"...) }

// AppendDecision appends decision i (0 for the first) of an answer.
func AppendDecision(b []byte, i int, d Decision) []byte {
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
	b = strconv.AppendInt(b, d.ResetMs, 10)
	b = append(b, `,"retry_after_ms":`...)
	b = strconv.AppendInt(b, d.RetryAfterMs, 10)
	if d.DelayMs > 0 {
		b = append(b, `,"delay_ms":`...)
		b = strconv.AppendInt(b, d.DelayMs, 10)
	}
	if d.EffectiveMs > 0 {
		b = append(b, `,"effective_ms":`...)
		b = strconv.AppendInt(b, d.EffectiveMs, 10)
	}
	if d.Skipped {
		b = append(b, `,"skipped":true`...)
	}
	if d.AtUs > 0 {
		b = append(b, `,"at_us":`...)
		b = strconv.AppendInt(b, d.AtUs, 10)
	}
	return append(b, '}')
}

// AppendError appends the JSON error body {"error": msg} of every non-200 answer, with a
// newline.
func AppendError(b []byte, msg string) []byte {
	b = append(b, `{"error":"`...)
	for i := 0; i < len(msg); i++ {
		switch c := msg[i]; {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20 || c == 0x7f:
			b = append(b, `\u00`...)
			b = append(b, "0123456789abcdef"[c>>4], "0123456789abcdef"[c&0xf])
		default:
			b = append(b, c)
		}
	}
	return append(b, "\"}\n"...)
}

// DecodeAnswer decodes the service's answer to a check of n descriptors, appending its
// decisions to dst[:0]. Members it does not know are skipped (v1 only ever gains optional
// members); known members of the wrong type, a member given twice, and a number of decisions
// other than n are errors. It does not allocate unless it fails or dst is too small.
func DecodeAnswer(body []byte, n int, dst []Decision) (allowed bool, decisions []Decision, err error) {
	var a Answer
	a, err = DecodeFullAnswer(body, n, dst)
	return a.Allowed, a.Decisions, err
}

// Answer is a decoded answer: DecodeAnswer's results and the counts of a request with a renew
// or release list (zero when the answer has none).
type Answer struct {
	Allowed           bool
	Decisions         []Decision
	Renewed, Released int64
	// Lost has bit i set when entry i of the request's renew list was not renewed: the
	// permit was no longer held.
	Lost uint64
	// Settled is the number of settle entries applied (a request with a settle list).
	Settled int64
}

// DecodeFullAnswer is DecodeAnswer that also reads the permits renewed and released.
func DecodeFullAnswer(body []byte, n int, dst []Decision) (a Answer, err error) {
	allowed, decisions, err := decodeAnswer(body, n, dst, &a)
	a.Allowed, a.Decisions = allowed, decisions
	if err != nil {
		return Answer{}, err
	}
	return a, nil
}

func decodeAnswer(body []byte, n int, dst []Decision, a *Answer) (allowed bool, decisions []Decision, err error) {
	s := scanner{b: body}
	decisions = dst[:0]
	top := loc{desc: -1}
	var seen int
	ferr := s.document(func(name []byte) (err *FieldError) {
		switch string(name) {
		case "allowed":
			at := loc{desc: -1, field: "allowed"}
			if err = once(&seen, 1, at); err == nil {
				allowed, err = s.boolean(at)
			}
		case "decisions":
			if err = once(&seen, 2, loc{desc: -1, field: "decisions"}); err == nil {
				decisions, err = s.decisions(decisions)
			}
		case "renewed", "released", "settled":
			err = s.count(name, &seen, a)
		case "lost":
			if err = once(&seen, 16, loc{desc: -1, field: "lost"}); err == nil {
				a.Lost, err = s.lost()
			}
		default:
			err = s.skip(top, 32) // an optional member of a later v1
		}
		return err
	})
	switch {
	case ferr != nil:
		return false, nil, answerErr(ferr)
	case seen&3 != 3:
		return false, nil, answerErr(&FieldError{Field: "body", Reason: "want allowed and decisions"})
	case len(decisions) != n:
		return false, nil, answerErr(&FieldError{Field: "decisions", Reason: strconv.Itoa(len(decisions)) + " decisions for " + strconv.Itoa(n) + " descriptors"})
	}
	return allowed, decisions, nil
}

// answerErr returns e as an error (a nil *FieldError is not a nil error).
func answerErr(e *FieldError) error { return e }

// once marks bit in seen, or reports that the member at was given twice.
func once(seen *int, bit int, at loc) *FieldError {
	if *seen&bit != 0 {
		return at.err(false, "given twice")
	}
	*seen |= bit
	return nil
}

// decisions reads the array of decisions, appending to dst.
func (s *scanner) decisions(dst []Decision) ([]Decision, *FieldError) {
	err := s.array(loc{desc: -1, field: "decisions"}, MaxDescriptors, "", func(i int) *FieldError {
		dst = append(dst, Decision{})
		return s.decision(i, &dst[i])
	})
	return dst, err
}

// decision reads decision i into d.
func (s *scanner) decision(i int, d *Decision) *FieldError {
	here := loc{desc: i, arr: "decisions"}
	var seen int
	return s.object(here, "an object", func(name []byte) *FieldError {
		bit, field := decisionField(name)
		if bit == 0 {
			return s.skip(here, 32) // an optional member of a later v1
		}
		at := loc{desc: i, arr: "decisions", field: field}
		if err := once(&seen, bit, at); err != nil {
			return err
		}
		return s.decisionValue(bit, at, d)
	})
}

// The members of a decision, as bits of a seen set.
const (
	dAllowed = 1 << iota
	dLimit
	dRemaining
	dReset
	dRetryAfter
	dDelay
	dSkipped
	dEffective
	dAt
)

func decisionField(name []byte) (int, string) {
	switch string(name) {
	case "allowed":
		return dAllowed, "allowed"
	case "limit":
		return dLimit, "limit"
	case "remaining":
		return dRemaining, "remaining"
	case "reset_ms":
		return dReset, "reset_ms"
	case "retry_after_ms":
		return dRetryAfter, "retry_after_ms"
	case "delay_ms":
		return dDelay, "delay_ms"
	case "skipped":
		return dSkipped, "skipped"
	case "effective_ms":
		return dEffective, "effective_ms"
	case "at_us":
		return dAt, "at_us"
	}
	return 0, ""
}

func (s *scanner) decisionValue(bit int, at loc, d *Decision) (err *FieldError) {
	switch bit {
	case dAllowed:
		d.Allowed, err = s.boolean(at)
	case dSkipped:
		d.Skipped, err = s.boolean(at)
	case dLimit:
		d.Limit, err = s.integer(at)
	case dRemaining:
		d.Remaining, err = s.integer(at)
	case dReset:
		d.ResetMs, err = s.integer(at)
	case dRetryAfter:
		d.RetryAfterMs, err = s.integer(at)
	case dDelay:
		d.DelayMs, err = s.integer(at)
	case dEffective:
		d.EffectiveMs, err = s.integer(at)
	case dAt:
		d.AtUs, err = s.integer(at)
	}
	return err
}

// count reads the answer's renewed, released or settled count into a.
func (s *scanner) count(name []byte, seen *int, a *Answer) *FieldError {
	at, bit, dst := loc{desc: -1, field: "renewed"}, 4, &a.Renewed
	switch string(name) {
	case "released":
		at, bit, dst = loc{desc: -1, field: "released"}, 8, &a.Released
	case "settled":
		at, bit, dst = loc{desc: -1, field: "settled"}, 64, &a.Settled
	}
	if err := once(seen, bit, at); err != nil {
		return err
	}
	v, err := s.integer(at)
	if err == nil && v < 0 {
		err = at.err(false, "negative")
	}
	*dst = v
	return err
}

// lost reads the answer's list of renew entries not renewed, as a bit set.
func (s *scanner) lost() (uint64, *FieldError) {
	at := loc{desc: -1, field: "lost"}
	var set uint64
	err := s.array(at, -1, "", func(int) *FieldError {
		i, err := s.integer(at)
		switch {
		case err != nil:
			return err
		case i < 0 || i >= MaxDescriptors:
			return at.err(false, "index "+strconv.FormatInt(i, 10)+" out of range")
		case set&(1<<i) != 0:
			return at.err(false, "index "+strconv.FormatInt(i, 10)+" given twice")
		}
		set |= 1 << i
		return nil
	})
	if err != nil {
		return 0, err
	}
	return set, nil
}
