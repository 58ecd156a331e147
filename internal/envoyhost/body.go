package envoyhost

// DefaultBufferLimit is the most body bytes the host buffers for a filter that returned
// StopIterationAndBuffer: Envoy's per_connection_buffer_limit_bytes default (1 MiB), which
// bounds the buffer of each direction of a stream.
const DefaultBufferLimit = 1 << 20

// deliverBuffered handles a body chunk while dir's filter asked for the body to be buffered
// (its last body callback returned StopIterationAndBuffer): as Envoy does, the chunk joins the
// buffered body and the body callback runs again with the size of the whole buffer, which the
// filter can read (proxy_get_buffer_bytes) in full. A buffer that passes the limit ends the
// stream as Envoy does: a request with a 413 local reply (details request_payload_too_large), a
// response (whose headers already went downstream) with a reset. It requires v.mu.
func (s *Stream) deliverBuffered(dir int, body []byte, eos bool) Action {
	v := s.vm
	limit := v.p.cfg.BufferLimit
	if limit <= 0 {
		limit = DefaultBufferLimit
	}
	buf, fn, name := &s.reqBody, v.ex.onRequestBody, "proxy_on_request_body"
	if dir == dirResponse {
		buf, fn, name = &s.respBody, v.ex.onResponseBody, "proxy_on_response_body"
	}
	*buf = append(*buf, body...)
	if len(*buf) > limit {
		return s.bufferOverflow(dir)
	}
	s.dirs[dir].paused = false
	if dir == dirRequest {
		s.reqBodyOpen = true
	} else {
		s.respBodyOpen = true
	}
	return s.callback(dir, phaseBody, fn, name, uint64(len(*buf)), b2u(eos))
}

// bufferOverflow ends a stream whose buffered body passed the limit. It requires v.mu.
func (s *Stream) bufferOverflow(dir int) Action {
	s.reqBodyOpen, s.respBodyOpen = false, false
	if dir == dirRequest {
		s.sendLocalReply(&LocalReply{Status: 413, Body: []byte("Payload Too Large"), GRPCStatus: -1, Details: "request_payload_too_large"}, false)
		return ActionStop
	}
	// A response body arrives only after its headers passed the filter and went downstream.
	s.ended, s.reset = true, true
	s.signal()
	return ActionStop
}
