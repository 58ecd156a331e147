package body

import "bytes"

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
	// lineBytes counts the bytes of the line in progress, kept or not, and lastCR says whether
	// the last of them was '\r': a line is blank by its bytes, not by what was kept of it (a
	// line dropped for its length does not end its event).
	lineBytes int
	lastCR    bool
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
	if len(b) > 0 {
		s.lineBytes += len(b)
		s.lastCR = b[len(b)-1] == '\r'
	}
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
	blank := s.lineBytes == 0 || s.lineBytes == 1 && s.lastCR
	s.buf, s.lineBytes, s.lastCR = s.buf[:0], 0, false
	if blank {
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
	if s.lineBytes > 0 {
		s.line(event)
	}
	s.line(event)
}
