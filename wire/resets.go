package wire

import "strconv"

// The reset log: every admin reset of a descriptor key is appended to a bounded log in the
// service's store, and each proxy polls it to forget the same keys in its shared data (the
// over-limit cache and penalty box of global rules, and every local rule, whose state lives
// only in the proxies). A proxy asks for the entries of its plugin after the last position it
// applied:
//
//	POST /v1/resets  {"plugin":"<plugin part of its keys>","since":41}
//
// and the service answers, in ascending order, at most MaxResetsPerAnswer entries:
//
//	{"seq":43,"resets":[{"seq":42,"key":"<plugin>/<rule>/<fingerprint>/<value>"},
//	  {"seq":43,"key":"..."}],"more":false,"truncated":false}
//
// seq is the log's latest position (or that of the page's last entry when more is true: ask
// again from there). since 0 is a proxy without a position: it gets only seq. truncated is
// true when entries after since were lost (the proxy fell behind the bounded log) or the log
// is behind since (the store lost it); the proxy then adopts seq.

const (
	// ResetsPath is the path of the reset log endpoint (POST), authenticated as Path is.
	ResetsPath = "/v1/resets"
	// MaxResetsPerAnswer is the most entries one answer of the reset log carries.
	MaxResetsPerAnswer = 256
	// maxSeq is the largest position of the log (Redis counters are signed 64-bit).
	maxSeq = 1<<63 - 1
)

// ResetsRequest is a decoded request of the reset log: the entries of Plugin (the plugin part
// of the keys, as the filter writes it) after position Since.
type ResetsRequest struct {
	Plugin string
	Since  uint64
}

// Reset is one entry of the reset log: the descriptor key Key was reset at position Seq.
type Reset struct {
	Seq uint64
	Key string
}

// ResetsAnswer is an answer of the reset log (see the package's reset log comment).
type ResetsAnswer struct {
	Seq       uint64
	Resets    []Reset
	More      bool
	Truncated bool
}

// AppendResetsRequest appends the request of the entries after since for the plugin named
// plugin (raw, as the filter names itself; written as in its keys, hashed when it would be).
// It does not allocate when b has room.
func AppendResetsRequest(b []byte, plugin string, since uint64) []byte {
	b = append(b, `{"plugin":"`...)
	b = appendPart(b, plugin, MaxPluginBytes)
	b = append(b, `","since":`...)
	b = strconv.AppendUint(b, min(since, maxSeq), 10)
	return append(b, '}')
}

// DecodeResetsRequest decodes and validates a /v1/resets body into req. It is strict as
// DecodeRequest is: an unknown member, a member given twice, a value of the wrong type,
// trailing data, a missing or invalid plugin (1 to MaxPluginBytes bytes of clean UTF-8) and a
// since that is not an integer between 0 and 2^63-1 are refused. since is optional (0).
// Every error is a *FieldError naming the field.
func DecodeResetsRequest(body []byte, req *ResetsRequest) error {
	*req = ResetsRequest{}
	if err := decodeResetsRequest(body, req); err != nil {
		return err
	}
	return nil
}

func decodeResetsRequest(body []byte, req *ResetsRequest) *FieldError {
	s := scanner{b: body}
	if s.space(); s.i == len(s.b) {
		return &FieldError{Field: "body", Reason: "empty; want a JSON object"}
	}
	var seen int
	err := s.document(func(name []byte) (err *FieldError) {
		switch string(name) {
		case "plugin":
			at := loc{desc: -1, field: "plugin"}
			if err = once(&seen, 1, at); err == nil {
				req.Plugin, err = s.stringValue(at)
			}
		case "since":
			at := loc{desc: -1, field: "since"}
			if err = once(&seen, 2, at); err == nil {
				req.Since, err = s.seq(at)
			}
		default:
			err = &FieldError{Field: fieldName(name), Reason: "unknown field"}
		}
		return err
	})
	switch {
	case err != nil:
		return err
	case seen&1 == 0:
		return &FieldError{Field: "plugin", Reason: "required"}
	}
	if err := CheckKey(req.Plugin, MaxPluginBytes); err != nil {
		return &FieldError{Field: "plugin", Reason: err.Error()}
	}
	return nil
}

// stringValue reads a string value at at, as a new string.
func (s *scanner) stringValue(at loc) (string, *FieldError) {
	if s.peek() != '"' {
		return "", s.wrongType(at, "a string")
	}
	v, err := s.str(at, false)
	return string(v), err
}

// seq reads a position of the log: an integer between 0 and 2^63-1.
func (s *scanner) seq(at loc) (uint64, *FieldError) {
	n, err := s.integer(at)
	if err == nil && n < 0 {
		err = at.err(false, "must be between 0 and "+strconv.FormatUint(maxSeq, 10)+", got "+strconv.FormatInt(n, 10))
	}
	return uint64(n), err
}

// AppendResetsAnswer appends a, with a newline. The caller keeps a.Resets within
// MaxResetsPerAnswer entries of valid keys, ascending, and positions within 2^63-1.
func AppendResetsAnswer(b []byte, a *ResetsAnswer) []byte {
	b = append(b, `{"seq":`...)
	b = strconv.AppendUint(b, a.Seq, 10)
	b = append(b, `,"resets":[`...)
	for i, r := range a.Resets {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"seq":`...)
		b = strconv.AppendUint(b, r.Seq, 10)
		b = append(b, `,"key":"`...)
		b = appendJSONText(b, r.Key)
		b = append(b, `"}`...)
	}
	b = append(b, `],"more":`...)
	b = strconv.AppendBool(b, a.More)
	b = append(b, `,"truncated":`...)
	b = strconv.AppendBool(b, a.Truncated)
	return append(b, "}\n"...)
}

// appendJSONText appends s escaped for the inside of a JSON string.
func appendJSONText(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20 || c == 0x7f:
			b = append(b, `\u00`...)
			b = append(b, "0123456789abcdef"[c>>4], "0123456789abcdef"[c&0xf])
		default:
			b = append(b, c)
		}
	}
	return b
}

// DecodeResetsAnswer decodes the service's answer of the reset log, appending its entries to
// dst[:0] (the answer's Resets). Members it does not know are skipped (v1 only ever gains
// optional members); seq and resets are required; a known member of the wrong type, a member
// given twice, trailing data, more than MaxResetsPerAnswer entries, an entry without seq or
// key, a key that is not 1 to MaxKeyBytes bytes of clean UTF-8, and positions that are not
// strictly ascending or exceed the answer's seq are errors. It allocates the key strings.
func DecodeResetsAnswer(body []byte, dst []Reset) (ResetsAnswer, error) {
	a := ResetsAnswer{Resets: dst[:0]}
	if err := decodeResetsAnswer(body, &a); err != nil {
		return ResetsAnswer{Resets: a.Resets[:0]}, err
	}
	return a, nil
}

func decodeResetsAnswer(body []byte, a *ResetsAnswer) *FieldError {
	s := scanner{b: body}
	top := loc{desc: -1}
	var seen int
	err := s.document(func(name []byte) (err *FieldError) {
		switch string(name) {
		case "seq":
			at := loc{desc: -1, field: "seq"}
			if err = once(&seen, 1, at); err == nil {
				a.Seq, err = s.seq(at)
			}
		case "resets":
			if err = once(&seen, 2, loc{desc: -1, field: "resets"}); err == nil {
				a.Resets, err = s.resets(a.Resets)
			}
		case "more", "truncated":
			at, bit, dst := loc{desc: -1, field: "more"}, 4, &a.More
			if name[0] == 't' {
				at, bit, dst = loc{desc: -1, field: "truncated"}, 8, &a.Truncated
			}
			if err = once(&seen, bit, at); err == nil {
				*dst, err = s.boolean(at)
			}
		default:
			err = s.skip(top, 32) // an optional member of a later v1
		}
		return err
	})
	switch {
	case err != nil:
		return err
	case seen&3 != 3:
		return &FieldError{Field: "body", Reason: "want seq and resets"}
	}
	return checkResetOrder(a)
}

// checkResetOrder checks that the entries of a are strictly ascending and within a.Seq.
func checkResetOrder(a *ResetsAnswer) *FieldError {
	var prev uint64
	for i, r := range a.Resets {
		at := loc{desc: i, arr: "resets", field: "seq"}
		switch {
		case r.Seq <= prev:
			return at.err(false, strconv.FormatUint(r.Seq, 10)+" after "+strconv.FormatUint(prev, 10)+": want ascending positions")
		case r.Seq > a.Seq:
			return at.err(false, strconv.FormatUint(r.Seq, 10)+" after the answer's seq "+strconv.FormatUint(a.Seq, 10))
		}
		prev = r.Seq
	}
	return nil
}

// resets reads the array of entries, appending to dst.
func (s *scanner) resets(dst []Reset) ([]Reset, *FieldError) {
	err := s.array(loc{desc: -1, field: "resets"}, MaxResetsPerAnswer, "entries", func(i int) *FieldError {
		dst = append(dst, Reset{})
		return s.reset(i, &dst[len(dst)-1])
	})
	return dst, err
}

// reset reads entry i into r.
func (s *scanner) reset(i int, r *Reset) *FieldError {
	here := loc{desc: i, arr: "resets"}
	var seen int
	err := s.object(here, "an object", func(name []byte) (err *FieldError) {
		switch string(name) {
		case "seq":
			at := loc{desc: i, arr: "resets", field: "seq"}
			if err = once(&seen, 1, at); err == nil {
				r.Seq, err = s.seq(at)
			}
		case "key":
			at := loc{desc: i, arr: "resets", field: "key"}
			if err = once(&seen, 2, at); err == nil {
				r.Key, err = s.stringValue(at)
			}
		default:
			err = s.skip(here, 32) // an optional member of a later v1
		}
		return err
	})
	switch {
	case err != nil:
		return err
	case seen&1 == 0:
		return loc{desc: i, arr: "resets", field: "seq"}.err(false, "required")
	case seen&2 == 0:
		return loc{desc: i, arr: "resets", field: "key"}.err(false, "required")
	}
	if err := CheckKey(r.Key, MaxKeyBytes); err != nil {
		return loc{desc: i, arr: "resets", field: "key"}.err(false, err.Error())
	}
	return nil
}

// ParseKey splits a descriptor key of the plugin named plugin (raw, as the filter names
// itself: its prefix is the plugin as its keys write it, hashed when it would be, and "/")
// into the rule part (as written: a rule name, or its hashed form), the fingerprint and the
// value (the rest, which may hold '/'). ok is false when the key is not of that plugin, the
// rule part is empty, or the fingerprint is not a canonical base-36 uint64. It does not
// allocate.
func ParseKey(key, plugin string) (rule string, fingerprint uint64, value string, ok bool) {
	rest, ok := cutPluginPrefix(key, plugin)
	if !ok {
		return "", 0, "", false
	}
	slash := indexSlash(rest)
	if slash <= 0 {
		return "", 0, "", false
	}
	rule, rest = rest[:slash], rest[slash+1:]
	if slash = indexSlash(rest); slash < 0 {
		return "", 0, "", false
	}
	fingerprint, ok = parseBase36(rest[:slash])
	if !ok {
		return "", 0, "", false
	}
	return rule, fingerprint, rest[slash+1:], true
}

// cutPluginPrefix returns key without the prefix of plugin's keys ("<plugin part>/").
func cutPluginPrefix(key, plugin string) (string, bool) {
	if len(plugin) <= MaxPluginBytes && cleanText(plugin) {
		if len(key) > len(plugin) && key[:len(plugin)] == plugin && key[len(plugin)] == '/' {
			return key[len(plugin)+1:], true
		}
		return "", false
	}
	var buf [hashedBytes + 1]byte
	p := append(appendHashed(buf[:0], plugin), '/')
	if len(key) >= len(p) && key[:len(p)] == string(p) {
		return key[len(p):], true
	}
	return "", false
}

func indexSlash(s string) int {
	for i := 0; i < len(s); i++ {
		if s[i] == '/' {
			return i
		}
	}
	return -1
}

// parseBase36 parses a fingerprint as the encoder writes it: lower-case base 36 without a
// leading zero, within a uint64.
func parseBase36(s string) (uint64, bool) {
	if s == "" || len(s) > maxFingerprintBytes || len(s) > 1 && s[0] == '0' {
		return 0, false
	}
	var n uint64
	for i := 0; i < len(s); i++ {
		var d uint64
		switch c := s[i]; {
		case c >= '0' && c <= '9':
			d = uint64(c - '0')
		case c >= 'a' && c <= 'z':
			d = uint64(c-'a') + 10
		default:
			return 0, false
		}
		if n > (1<<64-1-d)/36 {
			return 0, false
		}
		n = n*36 + d
	}
	return n, true
}
