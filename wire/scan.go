package wire

import (
	"strconv"
	"unicode/utf8"
)

// scanner reads JSON values from b at i. It is strict where the request decoder needs it
// (valid UTF-8, no lone surrogate escapes, integers without fraction or exponent) and never
// allocates on success: strings without escapes are returned as sub-slices of b, strings
// with escapes are decoded into buf.
type scanner struct {
	b   []byte
	i   int
	buf []byte
}

// space skips JSON whitespace.
func (s *scanner) space() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// peek returns the next non-space byte, or 0 at the end.
func (s *scanner) peek() byte {
	s.space()
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

// eat consumes c after optional whitespace.
func (s *scanner) eat(c byte) bool {
	if s.peek() != c { // peek is 0 at the end, and c is never 0
		return false
	}
	s.i++
	return true
}

// syntax returns a syntax error at the current offset.
func (s *scanner) syntax(what string) *FieldError {
	if s.i >= len(s.b) {
		return &FieldError{Field: "body", Reason: "truncated JSON"}
	}
	return &FieldError{Field: "body", Reason: "invalid JSON at offset " + strconv.Itoa(s.i) + ": " + what}
}

// kindAt names the JSON type of the value starting at the next non-space byte.
func (s *scanner) kindAt() string {
	switch c := s.peek(); {
	case c == '"':
		return "a string"
	case c == '{':
		return "an object"
	case c == '[':
		return "an array"
	case c == 't' || c == 'f':
		return "a boolean"
	case c == 'n':
		return "null"
	case c == '-' || c >= '0' && c <= '9':
		return "a number"
	}
	return "no JSON value"
}

// wrongType returns the error of a value at l that is not of type want (or of a document
// that ends where a value should be).
func (s *scanner) wrongType(at loc, want string) *FieldError {
	if s.peek() == 0 && s.i == len(s.b) {
		return s.syntax("")
	}
	return at.err(false, "want "+want+", got "+s.kindAt())
}

// member reads the next member name of an object whose '{' is consumed; first is true for
// the first member. It returns ok false when the object ends ('}' consumed). A name is
// returned as bytes valid until the next scan.
func (s *scanner) member(first bool, at loc) (name []byte, ok bool, err *FieldError) {
	if s.eat('}') {
		return nil, false, nil
	}
	if !first && !s.eat(',') {
		return nil, false, s.syntax("want , or } after an object member")
	}
	if s.peek() != '"' {
		return nil, false, s.syntax("want a member name")
	}
	if name, err = s.str(at, true); err != nil {
		return nil, false, err
	}
	if !s.eat(':') {
		return nil, false, s.syntax("want : after a member name")
	}
	return name, true, nil
}

// object reads the JSON object at at: want names what the value should be in the error when it
// is not an object. member is called with each member name in turn, the scanner standing at the
// member's value, which member must read (or skip); the name is valid until the next scan.
// object returns the first error, member's or its own.
func (s *scanner) object(at loc, want string, member func(name []byte) *FieldError) *FieldError {
	if !s.eat('{') {
		return s.wrongType(at, want)
	}
	for first := true; ; first = false {
		name, ok, err := s.member(first, at)
		if err != nil || !ok {
			return err
		}
		if err = member(name); err != nil {
			return err
		}
	}
}

// document reads a whole body that is one JSON object, calling member as object does, and refuses
// data after it.
func (s *scanner) document(member func(name []byte) *FieldError) *FieldError {
	if err := s.object(loc{desc: -1}, "a JSON object", member); err != nil {
		return err
	}
	if s.space(); s.i != len(s.b) {
		return &FieldError{Field: "body", Reason: "trailing data after the JSON object"}
	}
	return nil
}

// array reads the JSON array at at, calling elem with the index of each element in turn, the
// scanner standing at the element, which elem must read. An array of more than max elements
// is refused ("more than max", then noun when it is not ""); a negative max bounds nothing.
func (s *scanner) array(at loc, max int, noun string, elem func(i int) *FieldError) *FieldError {
	if !s.eat('[') {
		return s.wrongType(at, "an array")
	}
	if s.eat(']') {
		return nil
	}
	for i := 0; ; i++ {
		if i == max {
			tooMany := "more than " + strconv.Itoa(max)
			if noun != "" {
				tooMany += " " + noun
			}
			return at.err(false, tooMany)
		}
		if err := elem(i); err != nil {
			return err
		}
		if s.eat(']') {
			return nil
		}
		if !s.eat(',') {
			return s.syntax("want , or ] after an array element")
		}
	}
}

// str reads a string (s.b[s.i] is its opening quote, after whitespace). Raw bytes must be
// valid UTF-8 (no overlong form, no encoded surrogate); \u escapes must not leave a lone
// surrogate. at names the value for errors (name: the string is a member name of at).
func (s *scanner) str(at loc, name bool) ([]byte, *FieldError) {
	s.space()
	s.i++ // the quote
	start := s.i
	for s.i < len(s.b) {
		// The common case first: a run of printable ASCII that needs no decoding.
		for s.i < len(s.b) && s.b[s.i] >= 0x20 && s.b[s.i] < utf8.RuneSelf && s.b[s.i] != '"' && s.b[s.i] != '\\' {
			s.i++
		}
		if s.i == len(s.b) {
			break
		}
		switch c := s.b[s.i]; {
		case c == '"':
			s.i++
			return s.b[start : s.i-1], nil
		case c == '\\':
			s.buf = append(s.buf[:0], s.b[start:s.i]...)
			return s.escaped(at, name)
		case c < 0x20:
			return nil, s.syntax("control character in a string")
		case c < utf8.RuneSelf:
			s.i++
		default:
			r, size := utf8.DecodeRune(s.b[s.i:])
			if r == utf8.RuneError && size == 1 {
				return nil, at.err(name, "not valid UTF-8 (byte 0x"+strconv.FormatUint(uint64(c), 16)+" at offset "+strconv.Itoa(s.i)+")")
			}
			s.i += size
		}
	}
	return nil, s.syntax("unterminated string")
}

// escaped continues str after a backslash, decoding into s.buf.
func (s *scanner) escaped(at loc, name bool) ([]byte, *FieldError) {
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			s.i++
			return s.buf, nil
		case c < 0x20:
			return nil, s.syntax("control character in a string")
		case c != '\\':
			r, size := utf8.DecodeRune(s.b[s.i:])
			if r == utf8.RuneError && size == 1 {
				return nil, at.err(name, "not valid UTF-8 (byte 0x"+strconv.FormatUint(uint64(c), 16)+" at offset "+strconv.Itoa(s.i)+")")
			}
			s.buf = append(s.buf, s.b[s.i:s.i+size]...)
			s.i += size
			continue
		}
		if s.i+1 >= len(s.b) {
			break
		}
		e := s.b[s.i+1]
		s.i += 2
		switch e {
		case '"', '\\', '/':
			s.buf = append(s.buf, e)
		case 'b':
			s.buf = append(s.buf, '\b')
		case 'f':
			s.buf = append(s.buf, '\f')
		case 'n':
			s.buf = append(s.buf, '\n')
		case 'r':
			s.buf = append(s.buf, '\r')
		case 't':
			s.buf = append(s.buf, '\t')
		case 'u':
			r, err := s.unicodeEscape(at, name)
			if err != nil {
				return nil, err
			}
			s.buf = utf8.AppendRune(s.buf, r)
		default:
			s.i -= 2
			return nil, s.syntax("invalid escape in a string")
		}
	}
	return nil, s.syntax("unterminated string")
}

// unicodeEscape reads the hex digits of a \u escape whose "\u" is consumed, and a second
// escape when the first is a high surrogate. A lone surrogate is refused.
func (s *scanner) unicodeEscape(at loc, name bool) (rune, *FieldError) {
	r, ok := s.hex4()
	if !ok {
		return 0, s.syntax(`want 4 hex digits after \u`)
	}
	switch {
	case r >= 0xdc00 && r <= 0xdfff:
		return 0, at.err(name, `lone surrogate escape \u`+strconv.FormatUint(uint64(r), 16))
	case r < 0xd800 || r > 0xdbff:
		return r, nil
	}
	if s.i+1 >= len(s.b) || s.b[s.i] != '\\' || s.b[s.i+1] != 'u' {
		return 0, at.err(name, `lone surrogate escape \u`+strconv.FormatUint(uint64(r), 16))
	}
	s.i += 2
	lo, ok := s.hex4()
	if !ok {
		return 0, s.syntax(`want 4 hex digits after \u`)
	}
	if lo < 0xdc00 || lo > 0xdfff {
		return 0, at.err(name, `lone surrogate escape \u`+strconv.FormatUint(uint64(r), 16))
	}
	return 0x10000 + (r-0xd800)<<10 + (lo - 0xdc00), nil
}

func (s *scanner) hex4() (rune, bool) {
	if s.i+4 > len(s.b) {
		return 0, false
	}
	var r rune
	for _, c := range s.b[s.i : s.i+4] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	s.i += 4
	return r, true
}

// number reads a JSON number and reports whether it is an integer (no fraction, no exponent)
// that fits an int64. A malformed number is a syntax error.
func (s *scanner) number() (n int64, integer bool, err *FieldError) {
	s.space()
	neg := s.i < len(s.b) && s.b[s.i] == '-'
	if neg {
		s.i++
	}
	digits := s.i
	var u uint64
	overflow := false
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		d := uint64(s.b[s.i] - '0')
		if u > (1<<63-d)/10 {
			overflow = true
		}
		u = u*10 + d
		s.i++
	}
	switch {
	case s.i == digits:
		return 0, false, s.syntax("want a digit")
	case s.b[digits] == '0' && s.i-digits > 1:
		s.i = digits + 1
		return 0, false, s.syntax("a number with a leading zero")
	}
	integer = !overflow && (neg || u < 1<<63)
	if s.i < len(s.b) && s.b[s.i] == '.' {
		s.i++
		if !s.digits() {
			return 0, false, s.syntax("want a digit after the decimal point")
		}
		integer = false
	}
	if s.i < len(s.b) && (s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		s.i++
		if s.i < len(s.b) && (s.b[s.i] == '+' || s.b[s.i] == '-') {
			s.i++
		}
		if !s.digits() {
			return 0, false, s.syntax("want a digit in the exponent")
		}
		integer = false
	}
	if neg {
		return -int64(u), integer, nil
	}
	return int64(u), integer, nil
}

func (s *scanner) digits() bool {
	start := s.i
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		s.i++
	}
	return s.i > start
}

// literal consumes the literal word (true, false, null) if it is next.
func (s *scanner) literal(word string) bool {
	s.space()
	if len(s.b)-s.i >= len(word) && string(s.b[s.i:s.i+len(word)]) == word {
		s.i += len(word)
		return true
	}
	return false
}

// skip consumes one JSON value of any type, nested at most depth levels.
func (s *scanner) skip(at loc, depth int) *FieldError {
	if depth == 0 {
		return s.syntax("nested too deeply")
	}
	switch s.peek() {
	case '"':
		_, err := s.str(at, false)
		return err
	case '{':
		return s.object(at, "", func([]byte) *FieldError { return s.skip(at, depth-1) })
	case '[':
		return s.array(at, -1, "", func(int) *FieldError { return s.skip(at, depth-1) })
	case 't':
		return s.word("true")
	case 'f':
		return s.word("false")
	case 'n':
		return s.word("null")
	}
	_, _, err := s.number()
	return err
}

func (s *scanner) word(w string) *FieldError {
	if !s.literal(w) {
		return s.syntax("want a JSON value")
	}
	return nil
}

// boolean reads true or false.
func (s *scanner) boolean(at loc) (bool, *FieldError) {
	switch {
	case s.literal("true"):
		return true, nil
	case s.literal("false"):
		return false, nil
	}
	return false, s.wrongType(at, "a boolean")
}

// integer reads a JSON integer that fits an int64.
func (s *scanner) integer(at loc) (int64, *FieldError) {
	if c := s.peek(); c != '-' && (c < '0' || c > '9') {
		return 0, s.wrongType(at, "an integer")
	}
	start := s.i
	n, integer, err := s.number()
	if err != nil {
		return 0, err
	}
	if !integer {
		return 0, at.err(false, "want an integer between -2^63 and 2^63-1, got "+string(s.b[start:s.i]))
	}
	return n, nil
}
