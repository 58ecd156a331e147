package body

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"math"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// The errors of a reading. A document that is not JSON is ErrNotJSON, or ErrTooDeep when it is
// JSON this reader cannot read for its depth (another parser may).
var (
	// ErrNoField is returned by JSONInt when the document lacks the field.
	ErrNoField = errors.New("the JSON field is missing")
	// ErrNotInteger is returned by JSONInt when the field is not a non-negative integer.
	ErrNotInteger = errors.New("the JSON field is not a non-negative integer")
	// ErrNotJSON is returned for a document that is not JSON (in any of the encodings Read takes).
	ErrNotJSON = errors.New("the body is not JSON")
	// ErrTooDeep is returned for a document nested deeper than this reader goes (maxJSONDepth).
	ErrTooDeep = errors.New("the body nests deeper than 10000 levels")
)

// JSONInt returns the non-negative integer at path (object member names, outermost first) in the
// JSON document doc. It reads doc token by token and skips every value off the path without
// building it, so its work is linear in len(doc). The whole document must be valid JSON (see
// Read for the encodings and the member names it takes as an upstream's parser would). A member
// given more than once counts at its highest value, as a repeated cost header does: JSON parsers
// disagree on which duplicate wins (most keep the last), so a client cannot reserve little with one
// copy of max_tokens while the upstream reads another; and a copy that is not a plain integer from
// 0 to 10^18 counts as the number a lenient parser reads in it (1e3, 999.5 rounded up, "1000", a
// number too large), so that no copy lowers what the others say. It returns ErrNoField when the path
// is absent, ErrNotInteger when no copy there holds a non-negative number (a negative number, an
// object, a string that is not a number), and another error for a document that is not JSON.
func JSONInt(doc []byte, path []string) (int64, error) {
	rd, err := Read(doc, path)
	switch {
	case err != nil:
		return 0, err
	case !rd.Found:
		return 0, ErrNoField
	case !rd.AnyPlain && rd.Lenient == 0:
		return 0, ErrNotInteger
	}
	return max(rd.N, rd.Lenient), nil
}

// Reading is what a document holds at a path, over every copy of it.
type Reading struct {
	Found    bool  // the path is present
	Plain    bool  // every copy is a plain integer from 0 to 10^18
	AnyPlain bool  // some copy is
	Zero     bool  // some copy is 0
	N        int64 // the highest plain integer
	// Lenient is the highest value a lenient parser could read from a copy that is not a plain
	// integer (a number with a fraction or an exponent, rounded up; a number too large; a string
	// holding a number), bounded by maxLenient; 0 when none.
	Lenient int64
}

// maxLenient bounds a lenient reading (far above any cost a caller bounds it by).
const maxLenient = 1 << 62

// Read reads the copies of the value at path (object member names, outermost first) in doc. doc may be in any encoding that RFC 8259
// parsers detect (UTF-8 with or without a byte order mark, UTF-16 and UTF-32: Python's json.loads
// reads them all) and hold NaN and Infinity (Python reads them too), and a member name matches a
// path segment regardless of case (Go's encoding/json matches struct fields so), so that a body
// the upstream reads never escapes the reading. Every copy counts: the caller takes the highest.
func Read(doc []byte, path []string) (Reading, error) {
	doc = utf8JSON(doc)
	if !json.Valid(doc) {
		if tooDeep(doc) {
			return Reading{}, ErrTooDeep
		}
		if doc = nonFinite(doc); doc == nil || !json.Valid(doc) {
			return Reading{}, ErrNotJSON
		}
	}
	d := json.NewDecoder(bytes.NewReader(doc))
	d.UseNumber()
	rd := Reading{Plain: true}
	if err := readAt(d, path, &rd); err != nil {
		return Reading{}, err
	}
	return rd, nil
}

// readAt reads one whole value and adds the copies at path in it to rd. Its recursion is as deep
// as path is long.
func readAt(d *json.Decoder, path []string, rd *Reading) error {
	tok, err := d.Token()
	if err != nil {
		return err
	}
	if len(path) == 0 {
		rd.add(tok)
		return skipRest(d, tok)
	}
	if tok != json.Delim('{') {
		return skipRest(d, tok)
	}
	for d.More() {
		key, err := d.Token()
		if err != nil {
			return err
		}
		if name, _ := key.(string); !strings.EqualFold(name, path[0]) {
			if err := skipValue(d); err != nil {
				return err
			}
			continue
		}
		if err := readAt(d, path[1:], rd); err != nil {
			return err
		}
	}
	_, err = d.Token() // the closing brace
	return err
}

// add counts one copy of the value at the path, whose first token is tok.
func (rd *Reading) add(tok json.Token) {
	rd.Found = true
	var s string
	switch v := tok.(type) {
	case json.Number:
		if n, ok := PlainInt(string(v)); ok {
			rd.N, rd.AnyPlain, rd.Zero = max(rd.N, n), true, rd.Zero || n == 0
			return
		}
		s = string(v)
	case string:
		s = strings.ReplaceAll(strings.TrimSpace(v), "_", "")
	}
	rd.Plain = false
	if f, err := strconv.ParseFloat(s, 64); (err == nil || errors.Is(err, strconv.ErrRange)) && f > 0 {
		rd.Lenient = max(rd.Lenient, int64(math.Ceil(min(f, maxLenient))))
	}
}

// PlainInt parses a plain integer as meshlimit reads one that a client writes, in a JSON body or
// (package rules) a header: 1 to 18 decimal digits and nothing else (no sign, space, fraction or
// exponent), so 0 to 10^18-1.
func PlainInt(s string) (int64, bool) {
	if s == "" || len(s) > 18 {
		return 0, false
	}
	var n int64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// maxJSONDepth is how deeply encoding/json nests (its scanner refuses more).
const maxJSONDepth = 10000

// tooDeep reports whether doc nests arrays and objects deeper than encoding/json reads: a document
// that a parser without that bound (V8's JSON.parse is iterative) may still read.
func tooDeep(doc []byte) bool {
	depth, inString := 0, false
	for i := 0; i < len(doc); i++ {
		switch c := doc[i]; {
		case inString && c == '\\':
			i++
		case c == '"':
			inString = !inString
		case inString:
		case c == '[' || c == '{':
			if depth++; depth > maxJSONDepth {
				return true
			}
		case c == ']' || c == '}':
			depth--
		}
	}
	return false
}

// nonFinite returns a copy of doc whose NaN, Infinity and -Infinity literals (outside strings:
// Python's json.loads reads them by default, so a body holding one is a body its upstream reads) are
// written as values of the same length or shorter padded with spaces (NaN as the string "N", which
// holds no number: a NaN cost is no cost, never 0; Infinity as a number too large, which reads as
// the most); nil when doc holds none.
func nonFinite(doc []byte) []byte {
	var out []byte
	inString := false
	for i := 0; i < len(doc); i++ {
		c := doc[i]
		switch {
		case inString && c == '\\':
			i++
			continue
		case c == '"':
			inString = !inString
			continue
		case inString:
			continue
		}
		for _, lit := range [...][2]string{{"NaN", `"N"`}, {"Infinity", "1e999   "}, {"-Infinity", "-1e999   "}} {
			if bytes.HasPrefix(doc[i:], []byte(lit[0])) {
				if out == nil {
					out = append([]byte(nil), doc...)
				}
				copy(out[i:], lit[1])
				i += len(lit[0]) - 1
				break
			}
		}
	}
	return out
}

// utf8JSON returns doc in UTF-8 without a byte order mark: a document in UTF-16 or UTF-32 (told by
// its byte order mark, or by the zero bytes of its first two characters, as RFC 4627 and Python's
// json.detect_encoding tell them) is transcoded into a new slice.
func utf8JSON(doc []byte) []byte {
	if b, ok := bytes.CutPrefix(doc, []byte("\xef\xbb\xbf")); ok {
		return b
	}
	var order binary.ByteOrder
	width := 0
	switch {
	case bytes.HasPrefix(doc, []byte{0xff, 0xfe, 0, 0}):
		doc, order, width = doc[4:], binary.LittleEndian, 4
	case bytes.HasPrefix(doc, []byte{0, 0, 0xfe, 0xff}):
		doc, order, width = doc[4:], binary.BigEndian, 4
	case bytes.HasPrefix(doc, []byte{0xff, 0xfe}):
		doc, order, width = doc[2:], binary.LittleEndian, 2
	case bytes.HasPrefix(doc, []byte{0xfe, 0xff}):
		doc, order, width = doc[2:], binary.BigEndian, 2
	case len(doc) >= 4 && doc[0] == 0 && doc[1] == 0:
		order, width = binary.BigEndian, 4
	case len(doc) >= 4 && doc[1] == 0 && doc[2] == 0 && doc[3] == 0:
		order, width = binary.LittleEndian, 4
	case len(doc) >= 2 && doc[0] == 0:
		order, width = binary.BigEndian, 2
	case len(doc) >= 2 && doc[1] == 0:
		order, width = binary.LittleEndian, 2
	default:
		return doc
	}
	return transcode(doc, order, width)
}

// transcode returns the UTF-8 form of doc in UTF-16 (width 2) or UTF-32 (width 4) of order; a
// malformed unit becomes U+FFFD.
func transcode(doc []byte, order binary.ByteOrder, width int) []byte {
	out := make([]byte, 0, len(doc))
	for i := 0; i+width <= len(doc); i += width {
		var r rune
		if width == 4 {
			r = rune(order.Uint32(doc[i:]))
		} else {
			r = rune(order.Uint16(doc[i:]))
			if utf16.IsSurrogate(r) && i+4 <= len(doc) {
				r = utf16.DecodeRune(r, rune(order.Uint16(doc[i+2:])))
				if r != utf8.RuneError {
					i += 2
				}
			}
		}
		out = utf8.AppendRune(out, r)
	}
	return out
}

// skipRest reads the rest of a value whose first token was tok.
func skipRest(d *json.Decoder, tok json.Token) error {
	if tok != json.Delim('{') && tok != json.Delim('[') {
		return nil
	}
	for depth := 1; depth > 0; {
		tok, err := d.Token()
		if err == io.EOF {
			return io.ErrUnexpectedEOF
		}
		if err != nil {
			return err
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			depth++
		case json.Delim('}'), json.Delim(']'):
			depth--
		}
	}
	return nil
}

// skipValue reads one whole value.
func skipValue(d *json.Decoder) error {
	tok, err := d.Token()
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	if err != nil {
		return err
	}
	return skipRest(d, tok)
}
