package envoyhost

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/tetratelabs/wazero/api"
)

// Stream is one HTTP stream (request and response) on one VM, driven the way Envoy's
// filter manager drives the Wasm filter (§1.4, §4, §13): the host creates the stream
// context just before proxy_on_request_headers, holds back body and trailer
// callbacks while a direction is stopped on its headers, keeps calling the body callback
// with each new chunk while a direction is stopped on its body (body.go), applies local
// replies and resumptions after the guest call that asked for them returns, and ends
// with proxy_on_log, proxy_on_done and proxy_on_delete on Close. Both directions may
// carry data at once, as a bidirectional gRPC stream or an upgraded WebSocket does.
//
// A Stream's methods may be called from any goroutine; each takes the VM's lock, so
// they are serialized with the VM's other guest calls.
type Stream struct {
	vm    *VM
	info  StreamInfo
	id    uint32
	start time.Time

	created, closed bool
	headersSent     bool // SendRequestHeaders was called
	responseStarted bool // response headers exist (from upstream or a local reply)

	reqHeaders, reqTrailers     Headers
	respHeaders, respTrailers   Headers
	grpc                        bool // the request's content-type is gRPC's (Envoy's is_grpc_request_)
	reqHeadersOpen, reqBodyOpen bool
	reqTrailersOpen             bool
	respHeadersOpen             bool
	respBodyOpen                bool
	respTrailersOpen            bool

	dirs           [2]direction
	upstream       Headers
	upstreamBody   []byte
	downstream     Headers
	downstreamBody []byte
	local          *LocalReply
	reset          bool
	ended          bool
	localReplyHold bool
	filterState    map[string][]byte
	bodyStats      [2]BodyStats  // per direction (bodystats.go)
	wake           chan struct{} // closed when the stream stops being paused
}

type phase int

const (
	phaseHeaders phase = iota
	phaseBody
	phaseTrailers
)

const (
	dirRequest  = 0
	dirResponse = 1
)

// direction is the iteration state of the request or the response.
type direction struct {
	headersPassed bool
	// paused: the filter stopped this direction and has not let it go on. Stopped on its
	// headers or trailers, the direction holds back later body and trailers (pend*, Envoy's
	// StopAllIterationAndWatermark); stopped on its body (a single-iteration stop), it keeps
	// offering each new chunk to the body callback (body.go).
	paused   bool
	pausedAt phase
	// Data that arrived while stopped on the headers, delivered on resume.
	pendBody        []byte
	pendBodySet     bool
	pendEOS         bool
	pendTrailers    Headers
	pendTrailersSet bool
	// chunk is the chunk offered to the body callback in progress; held is the filter
	// manager's buffer: the chunks the filter stopped with StopIterationAndBuffer (1) or
	// StopIterationAndWatermark (2), released together when the direction goes on.
	chunk, held []byte
	// buffering: the last body callback returned 1, so the next chunk joins held before the
	// callback, which is passed the size of all of it and reads all of it.
	buffering bool
	flow      Flow
	aboveHigh bool // held passed the buffer limit and has not drained to half of it yet
}

// ErrStreamOrder is returned when a Stream method is called out of HTTP order: headers
// twice, data before headers, a response before the request was forwarded, or any
// call after Close.
var ErrStreamOrder = errors.New("envoyhost: stream method called out of order")

// ErrClosed is returned when the plugin was closed.
var ErrClosed = errors.New("envoyhost: plugin closed")

// NewStream returns a stream on v with the given per-request facts. No guest call is
// made until SendRequestHeaders.
func (v *VM) NewStream(info StreamInfo) *Stream {
	return &Stream{vm: v, info: info}
}

// ID returns the stream's context id, 0 before SendRequestHeaders. Ids come from the
// VM's context counter, so they repeat across VMs (§1.4).
func (s *Stream) ID() uint32 {
	s.vm.mu.Lock()
	defer s.vm.mu.Unlock()
	return s.id
}

func b2u(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// SendRequestHeaders creates the stream context (proxy_on_context_create) and calls
// proxy_on_request_headers with h. The filter may modify the headers; UpstreamHeaders
// returns them once forwarded.
func (s *Stream) SendRequestHeaders(h Headers, endOfStream bool) (Action, error) {
	v := s.vm
	v.mu.Lock()
	defer v.mu.Unlock()
	if err := s.usable(); err != nil {
		return ActionStop, err
	}
	if s.headersSent {
		return ActionStop, ErrStreamOrder
	}
	s.headersSent = true
	s.start = v.p.clock.Now()
	s.reqHeaders = lowerHeaders(h).Clone()
	s.grpc = isGRPC(s.reqHeaders)
	if v.failed != nil {
		return s.failedVM(dirRequest, phaseHeaders), nil
	}
	v.nextID++
	s.id = v.nextID
	if v.streams == nil {
		v.streams = make(map[uint32]*Stream)
	}
	v.streams[s.id] = s
	s.created = true
	if v.ex.onContextCreate != nil {
		if _, ok := v.call(v.ex.onContextCreate, "proxy_on_context_create", s.id, uint64(s.id), uint64(v.rootID)); !ok {
			return s.failedVM(dirRequest, phaseHeaders), nil
		}
	}
	s.reqHeadersOpen = true
	return s.callback(dirRequest, phaseHeaders, v.ex.onRequestHeaders, "proxy_on_request_headers",
		uint64(len(s.reqHeaders)), b2u(endOfStream)), nil
}

// SendRequestBody delivers a chunk of request body (proxy_on_request_body). While the
// request is stopped on its headers the chunk is held and delivered on resume (§4); while
// it is stopped on its body the chunk is offered to the filter at once (§13).
func (s *Stream) SendRequestBody(body []byte, endOfStream bool) (Action, error) {
	return s.sendBody(dirRequest, body, endOfStream)
}

// SendRequestTrailers delivers the request trailers (proxy_on_request_trailers),
// buffered while the request is paused.
func (s *Stream) SendRequestTrailers(h Headers) (Action, error) {
	return s.sendTrailers(dirRequest, h)
}

// SendResponseHeaders delivers the upstream response headers
// (proxy_on_response_headers). The request must have been forwarded.
// DownstreamHeaders returns the headers as the filter left them.
func (s *Stream) SendResponseHeaders(h Headers, endOfStream bool) (Action, error) {
	v := s.vm
	v.mu.Lock()
	defer v.mu.Unlock()
	if err := s.usable(); err != nil {
		return ActionStop, err
	}
	if s.ended {
		return ActionStop, nil
	}
	if !s.dirs[dirRequest].headersPassed || s.responseStarted {
		return ActionStop, ErrStreamOrder
	}
	s.responseStarted = true
	s.respHeaders = lowerHeaders(h).Clone()
	if v.failed != nil {
		return s.failedVM(dirResponse, phaseHeaders), nil
	}
	s.respHeadersOpen = true
	return s.callback(dirResponse, phaseHeaders, v.ex.onResponseHeaders, "proxy_on_response_headers",
		uint64(len(s.respHeaders)), b2u(endOfStream)), nil
}

// SendResponseBody delivers a chunk of response body (proxy_on_response_body),
// buffered while the response is paused.
func (s *Stream) SendResponseBody(body []byte, endOfStream bool) (Action, error) {
	return s.sendBody(dirResponse, body, endOfStream)
}

// SendResponseTrailers delivers the response trailers (proxy_on_response_trailers).
func (s *Stream) SendResponseTrailers(h Headers) (Action, error) {
	return s.sendTrailers(dirResponse, h)
}

func (s *Stream) sendBody(dir int, body []byte, eos bool) (Action, error) {
	v := s.vm
	v.mu.Lock()
	defer v.mu.Unlock()
	if err := s.usable(); err != nil {
		return ActionStop, err
	}
	if !s.directionStarted(dir) {
		return ActionStop, ErrStreamOrder
	}
	return s.deliverBody(dir, body, eos), nil
}

func (s *Stream) sendTrailers(dir int, h Headers) (Action, error) {
	v := s.vm
	v.mu.Lock()
	defer v.mu.Unlock()
	if err := s.usable(); err != nil {
		return ActionStop, err
	}
	if !s.directionStarted(dir) {
		return ActionStop, ErrStreamOrder
	}
	return s.deliverTrailers(dir, lowerHeaders(h).Clone()), nil
}

func (s *Stream) usable() error {
	if s.vm.p.isClosed() {
		return ErrClosed
	}
	if s.closed {
		return ErrStreamOrder
	}
	return nil
}

func (s *Stream) directionStarted(dir int) bool {
	if dir == dirRequest {
		return s.headersSent
	}
	return s.responseStarted
}

// deliverBody offers a chunk to the body callback of dir (body.go), or holds it back
// while dir is stopped on its headers or trailers. It requires v.mu.
func (s *Stream) deliverBody(dir int, body []byte, eos bool) Action {
	d := &s.dirs[dir]
	if s.ended {
		return ActionStop
	}
	if d.paused && d.pausedAt != phaseBody || !d.headersPassed {
		d.pendBody = append(d.pendBody, body...)
		d.pendBodySet, d.pendEOS = true, eos
		s.filled(dir, true) // a headers stop is StopAllIterationAndWatermark
		return ActionPause
	}
	if s.vm.failed != nil {
		return s.failedVM(dir, phaseBody)
	}
	return s.offerBody(dir, body, eos)
}

// deliverTrailers calls the trailers callback of dir, or buffers the trailers while
// dir is paused. It requires v.mu.
func (s *Stream) deliverTrailers(dir int, h Headers) Action {
	v := s.vm
	d := &s.dirs[dir]
	if s.ended {
		return ActionStop
	}
	if d.paused && d.pausedAt == phaseBody && v.failed == nil {
		// A filter that stopped its body (StopIterationAndBuffer and the like: Envoy's
		// StopSingleIteration, not a StopAll) is called with the trailers, as Envoy's filter
		// manager calls decodeTrailers on every filter that has not stopped all iteration;
		// when its trailers callback continues, the held body passes, then the trailers. A
		// body it buffered stays readable meanwhile.
		d.paused = false
	}
	if d.paused || !d.headersPassed {
		d.pendTrailers, d.pendTrailersSet = h, true
		return ActionPause
	}
	if v.failed != nil {
		return s.failedVM(dir, phaseTrailers)
	}
	if dir == dirRequest {
		s.reqTrailers, s.reqTrailersOpen = h, true
		return s.callback(dir, phaseTrailers, v.ex.onRequestTrailers, "proxy_on_request_trailers", uint64(len(h)))
	}
	s.respTrailers, s.respTrailersOpen = h, true
	return s.callback(dir, phaseTrailers, v.ex.onResponseTrailers, "proxy_on_response_trailers", uint64(len(h)))
}

// callback calls a headers or trailers callback and applies its outcome: a failed VM
// answers 503 (or passes when fail-open); a local reply forces stop; 0 continues; anything
// else pauses (StopAllIteration, §4). Deferred effects run afterwards. Body callbacks go
// through offerBody. It requires v.mu.
func (s *Stream) callback(dir int, ph phase, fn api.Function, name string, args ...uint64) Action {
	v := s.vm
	if fn == nil {
		s.passed(dir, ph)
		return s.action(dir)
	}
	var a [4]uint64
	a[0] = uint64(s.id)
	n := copy(a[1:], args)
	v.stopNext = false
	res, ok := v.call(fn, name, s.id, a[:n+1]...)
	if !ok {
		return s.failedVM(dir, ph)
	}
	if uint32(res) == 0 && !v.stopNext {
		s.passed(dir, ph)
	} else {
		s.dirs[dir].paused, s.dirs[dir].pausedAt = true, ph
	}
	v.stopNext = false
	v.runDeferred()
	return s.action(dir)
}

// passed records that phase ph of dir went through the filter: the data moves on
// and stops being accessible to the guest (§4). A body held until the trailers passes
// before them.
func (s *Stream) passed(dir int, ph phase) {
	d := &s.dirs[dir]
	switch {
	case ph == phaseBody:
		d.held = append(d.held, d.chunk...) // empty while buffering: the chunk joined held first
		d.chunk = d.chunk[:0]
		s.release(dir)
	case ph == phaseTrailers:
		if dir == dirRequest {
			s.reqTrailersOpen = false
		} else {
			s.respTrailersOpen = false
		}
		s.release(dir)
	case dir == dirRequest:
		s.reqHeadersOpen = false
		s.upstream = s.reqHeaders.Clone()
		d.headersPassed = true
	default:
		s.respHeadersOpen = false
		s.downstream = s.respHeaders.Clone()
		d.headersPassed = true
	}
}

// action reports dir's state. It requires v.mu.
func (s *Stream) action(dir int) Action {
	switch {
	case s.ended:
		return ActionStop
	case s.dirs[dir].paused || s.dirs[dir].pendBodySet || s.dirs[dir].pendTrailersSet:
		return ActionPause
	}
	return ActionContinue
}

// resume continues dir after proxy_continue_stream (deferred, §4). After a body stop, what
// the filter manager holds passes in one piece without another body callback (§13); after
// a trailers stop, the held body and the trailers pass; after a headers stop, the headers
// pass and the held-back body is delivered to the filter as one chunk, then the trailers.
// It requires v.mu.
func (s *Stream) resume(dir int) {
	d := &s.dirs[dir]
	if s.ended || !d.paused {
		return
	}
	d.paused = false
	if d.pausedAt == phaseBody {
		s.release(dir)
		s.signal()
		return
	}
	s.passed(dir, d.pausedAt)
	if d.pendBodySet {
		body, eos := d.pendBody, d.pendEOS
		d.pendBody, d.pendBodySet = nil, false
		s.deliverBody(dir, body, eos)
		if s.ended {
			s.signal()
			return
		}
		// Held trailers follow even when the body callback stopped: a body stop is a single-filter
		// stop, so the trailers still reach the filter (deliverTrailers).
	}
	if d.pendTrailersSet {
		h := d.pendTrailers
		d.pendTrailers, d.pendTrailersSet = nil, false
		s.deliverTrailers(dir, h)
	}
	s.signal()
}

// resetStream ends the stream after proxy_close_stream. It requires v.mu.
func (s *Stream) resetStream() {
	if s.ended {
		return
	}
	s.ended, s.reset = true, true
	s.signal()
}

// failedVM answers a stream on a failed VM (§4): it passes when the plugin is
// fail-open, else it gets a 503 local reply with details wasm_fail_stream and gRPC
// UNAVAILABLE, without further guest calls. It requires v.mu.
func (s *Stream) failedVM(dir int, ph phase) Action {
	s.vm.deferred = s.vm.deferred[:0]
	if s.vm.p.cfg.FailOpen {
		if !s.ended {
			s.dirs[dir].paused = false
			s.passed(dir, ph)
		}
		return s.action(dir)
	}
	s.sendLocalReply(&LocalReply{Status: 503, GRPCStatus: 14, Details: "wasm_fail_stream"}, true)
	return ActionStop
}

// sendLocalReply ends the stream with reply the way Envoy's DownstreamFilterManager does
// (§4, §13): before any response headers, the reply's headers and body pass through the
// filter's response callbacks (unless the host itself failed the stream); when response
// headers exist but the filter holds them, the reply goes straight to the client, past the
// filter; once response headers went downstream, the stream is reset and the reply dropped.
// It requires v.mu.
func (s *Stream) sendLocalReply(reply *LocalReply, hostFailure bool) {
	if s.ended {
		return
	}
	v := s.vm
	s.ended = true
	s.dirs[dirRequest].paused, s.dirs[dirResponse].paused = false, false
	s.reqBodyOpen, s.respBodyOpen = false, false
	switch {
	case s.dirs[dirResponse].headersPassed:
		s.reset = true
		s.signal()
		return
	case s.responseStarted:
		s.local = reply
		s.downstream, s.downstreamBody = s.localReplyHeaders(reply)
		if len(s.downstreamBody) > 0 {
			s.dirs[dirResponse].flow.Chunks++
		}
		s.signal()
		return
	}
	s.local = reply
	h, body := s.localReplyHeaders(reply)
	s.responseStarted = true
	s.respHeaders = h
	d := &s.dirs[dirResponse]
	d.chunk, d.buffering = append(d.chunk[:0], body...), false
	if !hostFailure && v.failed == nil && s.created {
		if fn := v.ex.onResponseHeaders; fn != nil {
			s.respHeadersOpen = true
			v.call(fn, "proxy_on_response_headers", s.id, uint64(s.id), uint64(len(h)), b2u(len(body) == 0))
			s.respHeadersOpen = false
		}
		if fn := v.ex.onResponseBody; fn != nil && len(body) > 0 && v.failed == nil {
			s.respBodyOpen = true
			v.call(fn, "proxy_on_response_body", s.id, uint64(s.id), uint64(len(body)), 1)
			s.respBodyOpen = false
		}
		v.runDeferred()
	}
	s.downstream = s.respHeaders.Clone()
	s.downstreamBody = append(s.downstreamBody[:0], d.chunk...)
	if len(d.chunk) > 0 {
		d.flow.Chunks++
	}
	d.chunk = d.chunk[:0]
	s.signal()
}

// signal wakes Wait callers. It requires v.mu.
func (s *Stream) signal() {
	if s.wake != nil {
		close(s.wake)
		s.wake = nil
	}
}

// Wait blocks until neither direction is paused, for example until the HTTP callout
// the filter paused for was answered and the filter resumed the request or sent a
// local reply. It returns ActionContinue or ActionStop, or ActionPause and ctx's error
// when ctx is done first. A stream paused on a VM that then failed stays paused, as in
// Envoy, until ctx ends.
func (s *Stream) Wait(ctx context.Context) (Action, error) {
	v := s.vm
	for {
		v.mu.Lock()
		act := s.action(dirRequest)
		if act == ActionContinue {
			act = s.action(dirResponse)
		}
		if act != ActionPause {
			v.mu.Unlock()
			return act, nil
		}
		if s.wake == nil {
			s.wake = make(chan struct{})
		}
		ch := s.wake
		v.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ActionPause, ctx.Err()
		}
	}
}

// LocalReply returns the local reply that ended the stream, or nil.
func (s *Stream) LocalReply() *LocalReply {
	s.vm.mu.Lock()
	defer s.vm.mu.Unlock()
	return s.local
}

// Reset reports whether the filter reset the stream with proxy_close_stream.
func (s *Stream) Reset() bool {
	s.vm.mu.Lock()
	defer s.vm.mu.Unlock()
	return s.reset
}

// UpstreamHeaders returns a copy of the request headers as forwarded upstream, nil
// until the filter let them through.
func (s *Stream) UpstreamHeaders() Headers {
	s.vm.mu.Lock()
	defer s.vm.mu.Unlock()
	return s.upstream.Clone()
}

// UpstreamBody returns a copy of the request body forwarded so far.
func (s *Stream) UpstreamBody() []byte {
	s.vm.mu.Lock()
	defer s.vm.mu.Unlock()
	return append([]byte(nil), s.upstreamBody...)
}

// DownstreamHeaders returns a copy of the response headers as sent downstream: the
// upstream's after the filter's proxy_on_response_headers, or the local reply's. It is
// nil until then.
func (s *Stream) DownstreamHeaders() Headers {
	s.vm.mu.Lock()
	defer s.vm.mu.Unlock()
	return s.downstream.Clone()
}

// DownstreamBody returns a copy of the response body sent downstream so far.
func (s *Stream) DownstreamBody() []byte {
	s.vm.mu.Lock()
	defer s.vm.mu.Unlock()
	return append([]byte(nil), s.downstreamBody...)
}

// Close ends the stream: proxy_on_log, proxy_on_done and proxy_on_delete, in that
// order, when the stream context was created on a healthy VM. HTTP call responses for
// the stream's callouts still reach the root context afterwards (§3). Close is
// idempotent.
func (s *Stream) Close() error {
	v := s.vm
	v.mu.Lock()
	defer v.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	if s.created && v.failed == nil && !v.closed {
		for _, c := range []struct {
			fn   api.Function
			name string
		}{
			{v.ex.onLog, "proxy_on_log"},
			{v.ex.onDone, "proxy_on_done"},
			{v.ex.onDelete, "proxy_on_delete"},
		} {
			if c.fn != nil {
				v.call(c.fn, c.name, s.id, uint64(s.id))
			}
		}
		v.deferred = v.deferred[:0]
	}
	delete(v.streams, s.id)
	s.ended = true
	s.signal()
	return nil
}

// RoundTrip runs one whole request lifecycle on v: request headers, body and
// trailers, a wait while the filter is paused (bounded by ctx), then, unless the
// stream ended with a local reply or a reset, resp as the upstream response, and
// finally Close. It is meant for tests and benchmarks that do not need the
// individual steps.
func (v *VM) RoundTrip(ctx context.Context, req *Request, resp *Response) (Result, error) {
	s := v.NewStream(req.Info)
	res, err := s.roundTrip(ctx, req, resp)
	if cerr := s.Close(); err == nil {
		err = cerr
	}
	return res, err
}

func (s *Stream) roundTrip(ctx context.Context, req *Request, resp *Response) (Result, error) {
	var res Result
	hasBody, hasTrailers := len(req.Body) > 0, req.Trailers != nil
	if _, err := s.SendRequestHeaders(req.Headers, !hasBody && !hasTrailers); err != nil {
		return res, err
	}
	if hasBody {
		if _, err := s.SendRequestBody(req.Body, !hasTrailers); err != nil {
			return res, err
		}
	}
	if hasTrailers {
		if _, err := s.SendRequestTrailers(req.Trailers); err != nil {
			return res, err
		}
	}
	act, err := s.Wait(ctx)
	if err != nil {
		return res, err
	}
	if act == ActionContinue && resp != nil {
		hasBody, hasTrailers = len(resp.Body) > 0, resp.Trailers != nil
		if _, err := s.SendResponseHeaders(resp.Headers, !hasBody && !hasTrailers); err != nil {
			return res, err
		}
		if hasBody {
			if _, err := s.SendResponseBody(resp.Body, !hasTrailers); err != nil {
				return res, err
			}
		}
		if hasTrailers {
			if _, err := s.SendResponseTrailers(resp.Trailers); err != nil {
				return res, err
			}
		}
		if _, err := s.Wait(ctx); err != nil {
			return res, err
		}
	}
	v := s.vm
	v.mu.Lock()
	res = Result{LocalReply: s.local, Upstream: s.upstream, Downstream: s.downstream, Reset: s.reset, FilterState: s.filterStateView()}
	v.mu.Unlock()
	return res, nil
}

// FilterState returns what the filter set with proxy_set_property on the stream so far,
// keyed "wasm.<path>" as Envoy names the filter state (see Result.FilterState).
func (s *Stream) FilterState() map[string]string {
	s.vm.mu.Lock()
	defer s.vm.mu.Unlock()
	return s.filterStateView()
}

// filterStateView copies the stream's filter state; the caller holds the VM's lock.
func (s *Stream) filterStateView() map[string]string {
	if len(s.filterState) == 0 {
		return nil
	}
	m := make(map[string]string, len(s.filterState))
	for k, v := range s.filterState {
		m["wasm."+strings.ReplaceAll(k, "\x00", ".")] = string(v)
	}
	return m
}
