package rules

import "strconv"

// The configuration's JSON reader, in place of encoding/json: a syntax check (this file), then
// walks over the members and elements of a document the check accepted and the decoding of its
// strings (jsonwalk.go). It accepts exactly what encoding/json's Valid accepts, and is small
// and free of reflection, so that proxy_on_configure touches little code (V8 compiles each
// function on its first call: see docs/performance.md, "Cold start").

// maxJSONDepth is the deepest nesting of arrays and objects the reader accepts, encoding/json's.
const maxJSONDepth = 10000

// syntaxChecker checks that b is one JSON value, with optional whitespace around it. On
// failure i is the offset of the byte at fault (len(b) when the document ends early) and msg
// says what is wrong.
type syntaxChecker struct {
	b     []byte
	i     int
	depth int
	msg   string
}

// checkSyntax reports whether data is valid JSON; if not, the offset of the byte at fault and
// what is wrong with it.
func checkSyntax(data []byte) (offset int, msg string, ok bool) {
	s := syntaxChecker{b: data}
	if !s.value() {
		return s.i, s.msg, false
	}
	if s.space(); s.i < len(s.b) {
		return s.i, s.unexpected("after the top-level value"), false
	}
	return 0, "", true
}

func (s *syntaxChecker) space() {
	for s.i < len(s.b) && isJSONSpace(s.b[s.i]) {
		s.i++
	}
}

func isJSONSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// unexpected sets and returns the message for the byte at i (or the end of the input).
func (s *syntaxChecker) unexpected(where string) string {
	if s.i >= len(s.b) {
		s.msg = "unexpected end of JSON input"
	} else {
		s.msg = "invalid character " + quoteByte(s.b[s.i]) + " " + where
	}
	return s.msg
}

// quoteByte shows c in an error message: 'c' when it is printable ASCII, else its code.
func quoteByte(c byte) string {
	if c >= 0x20 && c < 0x7f {
		return "'" + string(rune(c)) + "'"
	}
	return "0x" + strconv.FormatUint(uint64(c), 16)
}

// value checks the value at i (after optional whitespace) and moves past it.
func (s *syntaxChecker) value() bool {
	s.space()
	if s.i >= len(s.b) {
		s.unexpected("")
		return false
	}
	switch c := s.b[s.i]; {
	case c == '{' || c == '[':
		return s.compound(c)
	case c == '"':
		return s.str()
	case c == '-' || c >= '0' && c <= '9':
		return s.number()
	case c == 't':
		return s.literal("true")
	case c == 'f':
		return s.literal("false")
	case c == 'n':
		return s.literal("null")
	}
	s.unexpected("looking for beginning of value")
	return false
}

// compound checks an object (open '{') or an array (open '[').
func (s *syntaxChecker) compound(open byte) bool {
	if s.depth++; s.depth > maxJSONDepth {
		s.msg = "exceeded max depth"
		return false
	}
	closer := byte(']')
	if open == '{' {
		closer = '}'
	}
	s.i++
	s.space()
	if s.i < len(s.b) && s.b[s.i] == closer {
		s.i++
		s.depth--
		return true
	}
	for {
		if open == '{' && !s.memberName() {
			return false
		}
		if !s.value() {
			return false
		}
		s.space()
		switch {
		case s.i < len(s.b) && s.b[s.i] == ',':
			s.i++
		case s.i < len(s.b) && s.b[s.i] == closer:
			s.i++
			s.depth--
			return true
		default:
			if open == '{' {
				s.unexpected("after object key:value pair")
			} else {
				s.unexpected("after array element")
			}
			return false
		}
	}
}

// memberName checks a member's name and the colon after it.
func (s *syntaxChecker) memberName() bool {
	if s.space(); s.i >= len(s.b) || s.b[s.i] != '"' {
		s.unexpected("looking for beginning of object key string")
		return false
	}
	if !s.str() {
		return false
	}
	if s.space(); s.i >= len(s.b) || s.b[s.i] != ':' {
		s.unexpected("after object key")
		return false
	}
	s.i++
	return true
}

// str checks a string at its opening quote. Bytes that are not UTF-8 pass, as in encoding/json.
func (s *syntaxChecker) str() bool {
	for s.i++; s.i < len(s.b); s.i++ {
		switch c := s.b[s.i]; {
		case c == '"':
			s.i++
			return true
		case c < 0x20:
			s.unexpected("in string literal")
			return false
		case c == '\\':
			if !s.escape() {
				return false
			}
		}
	}
	s.unexpected("")
	return false
}

// escape checks the escape whose backslash is at i, leaving i on its last byte.
func (s *syntaxChecker) escape() bool {
	if s.i++; s.i >= len(s.b) {
		s.unexpected("")
		return false
	}
	switch s.b[s.i] {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		return true
	case 'u':
		for range 4 {
			if s.i++; s.i >= len(s.b) || hexDigit(s.b[s.i]) < 0 {
				s.unexpected("in \\u hexadecimal character escape")
				return false
			}
		}
		return true
	}
	s.unexpected("in string escape code")
	return false
}

// hexDigit is the value of the hexadecimal digit c, or -1.
func hexDigit(c byte) rune {
	switch {
	case c >= '0' && c <= '9':
		return rune(c - '0')
	case c >= 'a' && c <= 'f':
		return rune(c - 'a' + 10)
	case c >= 'A' && c <= 'F':
		return rune(c - 'A' + 10)
	}
	return -1
}

// number checks a number: -? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?.
func (s *syntaxChecker) number() bool {
	if s.b[s.i] == '-' {
		s.i++
	}
	switch {
	case s.i < len(s.b) && s.b[s.i] == '0':
		s.i++
	case !s.digits():
		return false
	}
	if s.i < len(s.b) && s.b[s.i] == '.' {
		s.i++
		if !s.digits() {
			return false
		}
	}
	if s.i < len(s.b) && (s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		if s.i++; s.i < len(s.b) && (s.b[s.i] == '+' || s.b[s.i] == '-') {
			s.i++
		}
		return s.digits()
	}
	return true
}

// digits moves past one or more decimal digits.
func (s *syntaxChecker) digits() bool {
	start := s.i
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		s.i++
	}
	if s.i == start {
		s.unexpected("in numeric literal")
		return false
	}
	return true
}

// literal checks the literal word at i.
func (s *syntaxChecker) literal(word string) bool {
	for j := 0; j < len(word); j++ {
		if s.i >= len(s.b) || s.b[s.i] != word[j] {
			s.unexpected("in literal " + word)
			return false
		}
		s.i++
	}
	return true
}
