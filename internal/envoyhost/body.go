package envoyhost

// DefaultBufferLimit is the most body bytes Envoy's filter manager holds in each direction of a
// stream before its watermark fires: the default per_connection_buffer_limit_bytes (1 MiB).
const DefaultBufferLimit = 1 << 20

// Flow is what Envoy's buffering and flow control did with one direction of a stream (§13).
type Flow struct {
	// ReadDisabled reports that Envoy stopped reading from this direction's sender (the client
	// for the request, the upstream for the response): the filter manager's buffer passed the
	// buffer limit while the filter held it with StopIterationAndWatermark (2) or a headers stop.
	// It clears when the buffer drains to half the limit, when the filter lets the data go.
	ReadDisabled bool
	// Pauses counts how often reading was disabled.
	Pauses int
	// Held is how many body bytes the filter manager holds for the filter now.
	Held int
	// Chunks counts the body writes past the filter: each chunk the filter continued, and each
	// release of what it held (one write, however many chunks it held).
	Chunks int
}

// Flow returns the buffering and flow control of the request and of the response so far.
func (s *Stream) Flow() (request, response Flow) {
	s.vm.mu.Lock()
	defer s.vm.mu.Unlock()
	return s.flowOf(dirRequest), s.flowOf(dirResponse)
}

func (s *Stream) flowOf(dir int) Flow {
	d := &s.dirs[dir]
	f := d.flow
	f.Held = len(d.held) + len(d.pendBody)
	return f
}

// bufferLimit is the connection's buffer limit (§13).
func (p *Plugin) bufferLimit() int {
	if p.cfg.BufferLimit > 0 {
		return p.cfg.BufferLimit
	}
	return DefaultBufferLimit
}

// offerBody calls dir's body callback with one chunk, as Envoy's filter manager and Wasm context
// do whether or not the filter stopped its body before (§13): after StopIterationAndBuffer the
// chunk joins the held body first and the callback gets (and reads) the size of all of it;
// otherwise it gets this chunk alone. It requires v.mu.
func (s *Stream) offerBody(dir int, body []byte, eos bool) Action {
	v, d := s.vm, &s.dirs[dir]
	size := len(body)
	if d.buffering {
		d.held = append(d.held, body...)
		if s.filled(dir, false) {
			return ActionStop
		}
		size, d.chunk = len(d.held), d.chunk[:0]
	} else {
		d.chunk = append(d.chunk[:0], body...)
	}
	fn, name := v.ex.onRequestBody, "proxy_on_request_body"
	if dir == dirResponse {
		fn, name = v.ex.onResponseBody, "proxy_on_response_body"
	}
	if fn == nil {
		s.passed(dir, phaseBody)
		return s.action(dir)
	}
	s.setBodyOpen(dir, true)
	v.stopNext = false
	res, ok := v.call(fn, name, s.id, uint64(s.id), uint64(size), b2u(eos))
	if !ok {
		return s.failedVM(dir, phaseBody)
	}
	r := uint32(res)
	if v.stopNext || r > 3 {
		r = 3 // cpp-host: a callback that sent a local reply, or a value past the enum, is StopIterationNoBuffer
	}
	v.stopNext = false
	s.afterBody(dir, r)
	v.runDeferred()
	return s.action(dir)
}

// afterBody applies a body callback's result (Envoy's commonHandleAfterDataCallback, §13):
// 0 lets the chunk go on, and after an earlier stop everything held with it, in one piece;
// 1 holds the chunk and keeps the whole held body readable; 2 holds the chunk, and past the
// buffer limit disables reading from the sender instead of failing; 3 drops the chunk. A stop
// is a single-iteration stop: the next chunk still reaches the filter. It requires v.mu.
func (s *Stream) afterBody(dir int, r uint32) {
	d := &s.dirs[dir]
	if r != 1 {
		s.setBodyOpen(dir, false) // Envoy's pointer to the chunk is not the filter's to use any more
	}
	switch r {
	case 0:
		s.passed(dir, phaseBody)
		return
	case 1, 2:
		if !d.buffering {
			d.held = append(d.held, d.chunk...)
		}
		if r == 1 {
			s.bodyStats[dir].Buffered++
		}
		d.buffering = r == 1
		d.paused, d.pausedAt = true, phaseBody
		s.filled(dir, r == 2)
	default:
		d.buffering = false
		d.paused, d.pausedAt = true, phaseBody
	}
	d.chunk = d.chunk[:0]
}

// release lets what the filter manager holds for dir go on as one write, without a body callback
// (Envoy's commonContinue continues with the next filter after a single-iteration stop). It
// requires v.mu.
func (s *Stream) release(dir int) {
	d := &s.dirs[dir]
	if len(d.held) > 0 {
		if dir == dirRequest {
			s.upstreamBody = append(s.upstreamBody, d.held...)
		} else {
			s.downstreamBody = append(s.downstreamBody, d.held...)
		}
		d.flow.Chunks++
	}
	d.held = d.held[:0]
	d.paused, d.buffering = false, false
	s.setBodyOpen(dir, false)
	s.drained(dir)
}

// filled checks the filter manager's buffer of dir against the limit after data joined it, as
// Envoy's watermark buffer does once per crossing: held for the filter's own reading (streaming
// false: StopIterationAndBuffer), the stream fails (tooLarge) and filled reports true; held for
// flow control (a headers stop, or StopIterationAndWatermark), Envoy stops reading from the
// sender instead. It requires v.mu.
func (s *Stream) filled(dir int, streaming bool) bool {
	d := &s.dirs[dir]
	if d.aboveHigh || len(d.held)+len(d.pendBody) <= s.vm.p.bufferLimit() {
		return false
	}
	d.aboveHigh = true
	if streaming {
		d.flow.ReadDisabled = true
		d.flow.Pauses++
		return false
	}
	s.tooLarge(dir)
	return true
}

// drained re-enables reading from dir's sender once the buffer that disabled it is down to half
// the limit (the watermark buffer's low watermark). It requires v.mu.
func (s *Stream) drained(dir int) {
	d := &s.dirs[dir]
	if d.aboveHigh && len(d.held)+len(d.pendBody) <= s.vm.p.bufferLimit()/2 {
		d.aboveHigh, d.flow.ReadDisabled = false, false
	}
}

// tooLarge ends a stream whose buffered body passed the limit, as Envoy's requestDataTooLarge and
// responseDataTooLarge do: a local reply (413 for a request, 500 for a response), which becomes a
// reset once response headers went downstream (sendLocalReply). It requires v.mu.
func (s *Stream) tooLarge(dir int) {
	s.reqBodyOpen, s.respBodyOpen = false, false
	if dir == dirRequest {
		s.sendLocalReply(&LocalReply{Status: 413, Body: []byte("Payload Too Large"), GRPCStatus: -1, Details: "request_payload_too_large"}, false)
		return
	}
	s.sendLocalReply(&LocalReply{Status: 500, Body: []byte("Internal Server Error"), GRPCStatus: -1, Details: "response_payload_too_large"}, false)
}

// setBodyOpen makes dir's body buffer readable (and writable) by the guest, or not. It requires
// v.mu.
func (s *Stream) setBodyOpen(dir int, open bool) {
	if dir == dirRequest {
		s.reqBodyOpen = open
	} else {
		s.respBodyOpen = open
	}
}

// bodyView is dir's body buffer as the guest sees it: the whole held body while the filter
// buffers it, else the chunk of the body callback in progress (Envoy's getBuffer).
func (s *Stream) bodyView(dir int) *[]byte {
	d := &s.dirs[dir]
	if d.buffering {
		return &d.held
	}
	return &d.chunk
}
