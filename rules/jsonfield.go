package rules

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
)

// Errors of a body a settling rule reads. The filter counts them; each leaves the reservation as it
// is (a request reserves its default).
var (
	errBodyTooLarge = errors.New("the body is larger than max_body")
	errNotPositive  = errors.New("the field is not a positive integer")
	errNotJSON      = errors.New("the body is not JSON")
	// ErrNoField is returned by JSONInt when the document lacks the field.
	ErrNoField = errors.New("the JSON field is missing")
	// ErrNotInteger is returned by JSONInt when the field is not a non-negative integer.
	ErrNotInteger = errors.New("the JSON field is not a non-negative integer")
)

// JSONInt returns the non-negative integer at path (object member names, outermost first) in the
// JSON document doc. It reads doc token by token and skips every value off the path without
// building it, so its work is linear in len(doc). The whole document must be valid JSON. A member
// given more than once counts at its highest value, as a repeated cost header does: JSON parsers
// disagree on which duplicate wins (most keep the last), so a client cannot reserve little with one
// copy of max_tokens while the upstream reads another. It returns ErrNoField when the path is
// absent, ErrNotInteger when a value there is anything but an integer from 0 to 10^18 (a fraction,
// a sign, a string, an object), and another error for a document that is not JSON.
func JSONInt(doc []byte, path []string) (int64, error) {
	if !json.Valid(doc) {
		return 0, errNotJSON
	}
	d := json.NewDecoder(bytes.NewReader(doc))
	d.UseNumber()
	n, found, err := highestAt(d, path)
	switch {
	case err != nil:
		return 0, err
	case !found:
		return 0, ErrNoField
	}
	return n, nil
}

// highestAt reads one whole value and returns the highest integer at path in it: found is false
// when path is absent. Its recursion is as deep as path is long.
func highestAt(d *json.Decoder, path []string) (n int64, found bool, err error) {
	tok, err := d.Token()
	if err != nil {
		return 0, false, err
	}
	if len(path) == 0 {
		num, ok := tok.(json.Number)
		if !ok {
			return 0, false, ErrNotInteger
		}
		n, ok := parseCost(string(num))
		if !ok && string(num) != "0" {
			return 0, false, ErrNotInteger
		}
		return n, true, nil
	}
	if tok != json.Delim('{') {
		return 0, false, skipRest(d, tok)
	}
	for d.More() {
		key, err := d.Token()
		if err != nil {
			return 0, false, err
		}
		if key != path[0] {
			if err := skipValue(d); err != nil {
				return 0, false, err
			}
			continue
		}
		v, ok, err := highestAt(d, path[1:])
		if err != nil {
			return 0, false, err
		}
		if ok && (!found || v > n) {
			n, found = v, true
		}
	}
	_, err = d.Token() // the closing brace
	return n, found, err
}

// skipRest reads the rest of a value whose first token was tok.
func skipRest(d *json.Decoder, tok json.Token) error {
	if tok != json.Delim('{') && tok != json.Delim('[') {
		return nil
	}
	for depth := 1; depth > 0; {
		tok, err := d.Token()
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
	depth := 0
	for {
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
		if depth == 0 {
			return nil
		}
	}
}

// SSE splits a text/event-stream body into events, holding at most max bytes of the event in
// progress: an event longer than that is dropped whole (Dropped counts it). Feed it the body chunk
// by chunk; for each complete event, it passes the event's data (its data lines joined with "\n")
// to the callback.
type SSE struct {
	Max     int
	Dropped int
	buf     []byte
	skip    bool // the event in progress passed Max: drop it up to its end
	data    []byte
}

// Write feeds a chunk of the body.
func (s *SSE) Write(chunk []byte, event func(data []byte)) {
	for len(chunk) > 0 {
		i := bytes.IndexByte(chunk, '\n')
		if i < 0 {
			s.add(chunk)
			return
		}
		s.add(chunk[:i])
		chunk = chunk[i+1:]
		s.line(event)
	}
}

// add appends part of a line, or drops the event when it grows past Max.
func (s *SSE) add(b []byte) {
	if s.skip {
		return
	}
	if len(s.buf)+len(b) > s.Max {
		s.skip, s.buf, s.data = true, s.buf[:0], s.data[:0]
		s.Dropped++
		return
	}
	s.buf = append(s.buf, b...)
}

// line ends the line in buf: a data line adds to the event, an empty line ends it.
func (s *SSE) line(event func([]byte)) {
	l := bytes.TrimSuffix(s.buf, []byte{'\r'})
	s.buf = s.buf[:0]
	if len(l) == 0 {
		if !s.skip && len(s.data) > 0 {
			event(s.data)
		}
		s.skip, s.data = false, s.data[:0]
		return
	}
	if s.skip {
		return
	}
	if v, ok := bytes.CutPrefix(l, []byte("data:")); ok {
		v = bytes.TrimPrefix(v, []byte{' '})
		if len(s.data)+len(v)+1 > s.Max {
			s.skip, s.data = true, s.data[:0]
			s.Dropped++
			return
		}
		if len(s.data) > 0 {
			s.data = append(s.data, '\n')
		}
		s.data = append(s.data, v...)
	}
}

// Close ends the body: an event that was not followed by an empty line is still passed.
func (s *SSE) Close(event func([]byte)) {
	if len(s.buf) > 0 {
		s.line(event)
	}
	s.line(event)
}
