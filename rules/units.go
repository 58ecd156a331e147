package rules

import (
	"errors"
	"math"
	"strconv"
	"strings"
	"time"
)

// Human units used in the configuration.
//
// A duration is a sequence of <integer><unit> terms, with units "ms", "s", "m", "h" and "d"
// (24 hours): "250ms", "30s", "1m30s", "1h", "7d". Fractions, signs and the units below a
// millisecond are rejected: they have no use in rate limiting and hide typos.
//
// A rate is "<quota>/<window>": the quota is a positive integer, and the window is either a
// single unit letter meaning one of it ("100/s", "100/m", "1000/h", "10000/d") or a
// duration ("5/30s", "10/1m30s").

// maxDuration bounds every configured duration: one leap year.
const maxDuration = 366 * 24 * time.Hour

// parseDuration parses a configuration duration (see above). It never returns a negative
// value or one above maxDuration.
func parseDuration(s string) (time.Duration, error) {
	if s == "" {
		return 0, errors.New("empty duration")
	}
	var total time.Duration
	rest := s
	for rest != "" {
		i := 0
		for i < len(rest) && rest[i] >= '0' && rest[i] <= '9' {
			i++
		}
		if i == 0 {
			return 0, errorf("invalid duration %q: want terms like \"250ms\", \"30s\", \"1m30s\", \"1h\" or \"7d\"", s)
		}
		if i > 12 {
			return 0, errorf("invalid duration %q: number too large", s)
		}
		n, _ := strconv.ParseInt(rest[:i], 10, 64) // at most 12 digits: cannot fail
		rest = rest[i:]
		j := 0
		for j < len(rest) && (rest[j] < '0' || rest[j] > '9') {
			j++
		}
		var unit time.Duration
		switch rest[:j] {
		case "ms":
			unit = time.Millisecond
		case "s":
			unit = time.Second
		case "m":
			unit = time.Minute
		case "h":
			unit = time.Hour
		case "d":
			unit = 24 * time.Hour
		case "":
			return 0, errorf("invalid duration %q: missing unit (ms, s, m, h or d)", s)
		default:
			return 0, errorf("invalid duration %q: unknown unit %q (want ms, s, m, h or d)", s, rest[:j])
		}
		rest = rest[j:]
		if n > int64(maxDuration/unit) {
			return 0, errorf("invalid duration %q: longer than 366d", s)
		}
		total += time.Duration(n) * unit
		if total > maxDuration {
			return 0, errorf("invalid duration %q: longer than 366d", s)
		}
	}
	return total, nil
}

// parseRate parses "<quota>/<window>" (see above) into a quota and a positive window.
func parseRate(s string) (quota int64, window time.Duration, err error) {
	q, w, ok := strings.Cut(s, "/")
	if !ok {
		return 0, 0, errorf("invalid rate %q: want \"<quota>/<window>\", e.g. \"100/s\", \"1000/h\" or \"5/30s\"", s)
	}
	quota, err = strconv.ParseInt(q, 10, 64)
	if err != nil || quota <= 0 || q[0] == '+' {
		return 0, 0, errorf("invalid rate %q: quota must be a positive integer", s)
	}
	switch {
	case w == "s" || w == "m" || w == "h" || w == "d":
		w = "1" + w
	case w != "" && (w[0] < '0' || w[0] > '9'):
		return 0, 0, errorf("invalid rate %q: unknown unit %q (want s, m, h, d, day, week, month, year, or a duration such as \"30s\")", s, w)
	}
	window, err = parseDuration(w)
	if err != nil {
		return 0, 0, errorf("invalid rate %q: window: %w", s, err)
	}
	if window <= 0 {
		return 0, 0, errorf("invalid rate %q: window must be positive", s)
	}
	return quota, window, nil
}

// formatDuration renders d in the configuration's own units, as compactly as possible
// ("1m30s", "250ms", "7d"). It is the inverse of parseDuration for whole milliseconds.
func formatDuration(d time.Duration) string {
	if d <= 0 {
		return "0s"
	}
	var b []byte
	for _, u := range [...]struct {
		d    time.Duration
		name string
	}{{24 * time.Hour, "d"}, {time.Hour, "h"}, {time.Minute, "m"}, {time.Second, "s"}, {time.Millisecond, "ms"}} {
		if n := d / u.d; n > 0 {
			b = strconv.AppendInt(b, int64(n), 10)
			b = append(b, u.name...)
			d -= n * u.d
		}
	}
	if len(b) == 0 {
		return d.String()
	}
	return string(b)
}

// durationIn parses an optional duration in [lo, hi], returning def when s is empty.
func (v *validator) durationIn(path, s string, def, lo, hi time.Duration) time.Duration {
	if s == "" {
		return def
	}
	d, err := parseDuration(s)
	switch {
	case err != nil:
		v.failf(path, "%v", err)
	case d < lo || d > hi:
		v.failf(path, "%s out of range: want %s to %s", s, formatDuration(lo), formatDuration(hi))
	default:
		return d
	}
	return def
}

// optInt is an optional integer in the configuration. Istio hands pluginConfig over as a
// protobuf Struct, whose numbers are doubles, so integral floats such as 100.0 or 1e3 are
// accepted; fractions and values beyond ±2^53 are not. JSON null leaves it unset.
type optInt struct {
	Value int64
	Set   bool
}

// maxExactFloat is the largest integer a float64 holds exactly (2^53).
const maxExactFloat = 1 << 53

// UnmarshalJSON implements json.Unmarshaler.
func (o *optInt) UnmarshalJSON(b []byte) error {
	s := string(b)
	if s == "null" {
		*o = optInt{}
		return nil
	}
	if len(s) == 0 || !(s[0] == '-' || (s[0] >= '0' && s[0] <= '9')) {
		return errorf("want an integer, got %s", jsonKind(b))
	}
	if v, err := strconv.ParseInt(s, 10, 64); err == nil {
		*o = optInt{Value: v, Set: true}
		return nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsInf(f, 0) || math.Abs(f) > maxExactFloat {
		return errorf("want an integer, got %s (out of range)", echoText(s))
	}
	if !integralLiteral(s) {
		return errorf("want an integer, got %s", echoText(s))
	}
	*o = optInt{Value: int64(f), Set: true}
	return nil
}

// integralLiteral reports whether the JSON number s is an integer as written, in decimal: 1e2,
// 100.0 and 1.5e1 are (a protobuf Struct may hand an integer over so), 99.99999999999999999 and
// 1e-996 are not, though a float64 rounds them to 100 and 0.
func integralLiteral(s string) bool {
	mant, exp, _ := strings.Cut(strings.ToLower(s), "e")
	intPart, frac, _ := strings.Cut(strings.TrimPrefix(mant, "-"), ".")
	digits := strings.TrimRight(intPart+frac, "0")
	if strings.Trim(digits, "0") == "" {
		return true // zero, whatever its exponent
	}
	// The value is digits × 10^(e - len(frac) + the zeros trimmed): an integer when that power
	// is not negative. An exponent too long to parse is out of range or below every integer.
	e, err := strconv.Atoi(strings.TrimPrefix(exp, "+"))
	if exp == "" {
		e, err = 0, nil
	}
	return err == nil && e-len(frac)+len(intPart+frac)-len(digits) >= 0
}

// MarshalJSON implements json.Marshaler, for round trips in tests and tools.
func (o optInt) MarshalJSON() ([]byte, error) {
	if !o.Set {
		return []byte("null"), nil
	}
	return strconv.AppendInt(nil, o.Value, 10), nil
}

var _ unmarshaler = (*optInt)(nil)

// jsonKind names the JSON type of the value b, for error messages.
func jsonKind(b []byte) string {
	for _, c := range b {
		switch c {
		case ' ', '\t', '\r', '\n':
			continue
		case '"':
			return "a string"
		case '{':
			return "an object"
		case '[':
			return "an array"
		case 't', 'f':
			return "a boolean"
		case 'n':
			return "null"
		default:
			return "a number"
		}
	}
	return "nothing"
}

// formatRate renders a quota and window as a rate string that parseRate accepts.
func formatRate(quota int64, window time.Duration) string {
	w := formatDuration(window)
	switch w {
	case "1s", "1m", "1h", "1d":
		w = w[1:]
	}
	return strconv.FormatInt(quota, 10) + "/" + w
}
