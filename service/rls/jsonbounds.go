package rls

// jsonBounds returns boundsError of the /json request b, counted from its text without
// decoding or allocating anything: the members of the top-level object's "descriptors" array,
// and of each descriptor object's "entries" array (names compared after their escapes, as
// protojson reads them). It counts up to the end of b or the first byte it cannot read (the rest
// is protojson's to refuse), and is nil for a body within the bounds, valid JSON or not. It
// checks no syntax: a body it counts past the bounds is refused whatever else is wrong with it,
// as protojson would have refused it, after allocating every descriptor.
func jsonBounds(b []byte, maxDescriptors, maxEntries int) error {
	s := jsonScan{b: b}
	descriptors, wide, entries := 0, -1, 0
	if !s.begin('{') {
		return nil
	}
	for s.more('}') {
		if !s.member("descriptors") || !s.begin('[') {
			s.skip()
			continue
		}
		for s.more(']') {
			if n := s.entries(); wide < 0 && n > maxEntries {
				wide, entries = descriptors, n
			}
			descriptors++
		}
	}
	return boundsError(descriptors, wide, entries, maxDescriptors, maxEntries)
}

// jsonScan is a cursor over a JSON text that reads its structure only; bad is set at the first
// byte it cannot read, after which every method reads nothing.
type jsonScan struct {
	b   []byte
	i   int
	bad bool
}

// entries reads one descriptor and counts the members of its "entries" arrays.
func (s *jsonScan) entries() int {
	if !s.begin('{') {
		s.skip()
		return 0
	}
	n := 0
	for s.more('}') {
		if !s.member("entries") || !s.begin('[') {
			s.skip()
			continue
		}
		for s.more(']') {
			s.skip()
			n++
		}
	}
	return n
}

// space skips white space; it sets bad at the end of the text.
func (s *jsonScan) space() {
	for s.i < len(s.b) && (s.b[s.i] == ' ' || s.b[s.i] == '\t' || s.b[s.i] == '\n' || s.b[s.i] == '\r') {
		s.i++
	}
	if s.i == len(s.b) {
		s.bad = true
	}
}

// begin reads c, the start of an object or array, when it comes next.
func (s *jsonScan) begin(c byte) bool {
	if s.space(); s.bad || s.b[s.i] != c {
		return false
	}
	s.i++
	return true
}

// more reports whether a member of the object or array that end closes comes next, reading the
// comma before it, or reads end.
func (s *jsonScan) more(end byte) bool {
	if s.space(); s.bad {
		return false
	}
	switch s.b[s.i] {
	case end:
		s.i++
		return false
	case ',':
		s.i++
	}
	return true
}

// member reads an object member's name and colon and reports whether the name is name.
func (s *jsonScan) member(name string) bool {
	if s.space(); s.bad || s.b[s.i] != '"' {
		s.bad = true
		return false
	}
	start := s.i + 1
	s.str()
	end := s.i - 1
	if s.space(); s.bad || s.b[s.i] != ':' {
		s.bad = true
		return false
	}
	s.i++
	return jsonNameIs(s.b[start:end], name)
}

// str reads a string, its opening quote next.
func (s *jsonScan) str() {
	for s.i++; s.i < len(s.b); s.i++ {
		switch s.b[s.i] {
		case '\\':
			s.i++
		case '"':
			s.i++
			return
		}
	}
	s.bad = true
}

// skip reads one value.
func (s *jsonScan) skip() {
	if s.space(); s.bad {
		return
	}
	switch s.b[s.i] {
	case '"':
		s.str()
	case '{', '[':
		for depth := 0; s.i < len(s.b); {
			switch s.b[s.i] {
			case '"':
				s.str()
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
			}
			if s.i++; depth == 0 {
				return
			}
		}
		s.bad = true
	case '}', ']', ',', ':':
		s.bad = true // not a value: nothing to read
	default: // a number or a literal
		for s.i < len(s.b) && !jsonDelimiter(s.b[s.i]) {
			s.i++
		}
	}
}

// jsonDelimiter reports whether c ends a number or a literal.
func jsonDelimiter(c byte) bool {
	switch c {
	case ',', '}', ']', ':', '"', ' ', '\t', '\n', '\r':
		return true
	}
	return false
}

// jsonNameIs reports whether the member name raw (between its quotes, escapes undecoded) is
// name, an ASCII name.
func jsonNameIs(raw []byte, name string) bool {
	k := 0
	for i := 0; i < len(raw); k++ {
		c := raw[i]
		i++
		if c == '\\' { // only a \u escape can make a letter of name
			if i+5 > len(raw) || raw[i] != 'u' {
				return false
			}
			r, ok := hex4(raw[i+1 : i+5])
			if !ok || r > 0x7f {
				return false
			}
			c, i = byte(r), i+5
		}
		if k >= len(name) || name[k] != c {
			return false
		}
	}
	return k == len(name)
}

// hex4 is the value of four hexadecimal digits.
func hex4(b []byte) (rune, bool) {
	var r rune
	for _, c := range b {
		switch {
		case '0' <= c && c <= '9':
			r = r<<4 | rune(c-'0')
		case 'a' <= c && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case 'A' <= c && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}
