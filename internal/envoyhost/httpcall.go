package envoyhost

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// Limits of the host's HTTP callouts.
const (
	// maxCallsInFlight bounds the outstanding callouts of one plugin; past it
	// proxy_http_call returns InternalFailure, as when Envoy's async client cannot
	// send.
	maxCallsInFlight = 1024
	// maxCallResponseBody is the response buffer limit: a larger body fails the call
	// with (0, 0, 0), as Envoy's async client does past its buffer limit (§3).
	maxCallResponseBody = 16 << 20
)

// Bodies of the responses Envoy's router synthesizes for upstream failures (§3).
const (
	bodyTimeout        = "upstream request timeout"
	bodyConnectFailure = "upstream connect error or disconnect/reset before headers. reset reason: connection failure"
	bodyTermination    = "upstream connect error or disconnect/reset before headers. reset reason: connection termination"
)

// callResponse is an HTTP call's response while proxy_on_http_call_response runs.
type callResponse struct {
	headers  Headers
	body     []byte
	trailers Headers
	failed   bool // reset after headers or over the buffer limit: (0, 0, 0)
}

// pendingCall is an outstanding HTTP call owned by a VM's root context.
type pendingCall struct {
	token  uint32
	cancel context.CancelFunc
	vm     *VM
	due    time.Time   // with Config.CallTimeoutsOnClock: when the call times out on the clock
	ended  atomic.Bool // the call no longer counts in Plugin.CallsInFlight
}

// end stops counting the call in flight, once.
func (c *pendingCall) end() {
	if c.ended.CompareAndSwap(false, true) {
		c.vm.p.inflight.Add(-1)
	}
}

// proxyHTTPCall implements spec#proxy_http_call as Envoy's Context::httpCall (§3): a
// negative timeout, an unknown cluster or missing :path, :method or :authority is
// BadArgument; otherwise the request really goes to the cluster's address and the
// response is delivered to the root context of this VM after the current guest call.
func proxyHTTPCall(v *VM, s []uint64) Status {
	cluster, ok1 := v.str(u32(s[0]), u32(s[1]))
	hdrs, ok2 := v.view(u32(s[2]), u32(s[3]))
	body, ok3 := v.view(u32(s[4]), u32(s[5]))
	trl, ok4 := v.view(u32(s[6]), u32(s[7]))
	if !ok1 || !ok2 || !ok3 || !ok4 {
		return StatusInvalidMemoryAccess
	}
	timeout := int32(u32(s[8]))
	tokenPtr := u32(s[9])
	if timeout < 0 {
		return StatusBadArgument
	}
	addr, ok := v.p.cfg.Clusters[cluster]
	if !ok {
		return StatusBadArgument
	}
	h := lowerHeaders(parsePairs(hdrs))
	path, okPath := h.Get(":path")
	method, okMethod := h.Get(":method")
	authority, okHost := h.Get(":authority")
	if !okPath || !okMethod || !okHost {
		return StatusBadArgument
	}
	if _, ok := v.mem.ReadUint32Le(tokenPtr); !ok {
		return StatusInvalidMemoryAccess
	}
	if v.p.inflight.Add(1) > maxCallsInFlight {
		v.p.inflight.Add(-1)
		return StatusInternalFailure
	}
	v.nextCallID++
	if v.nextCallID == 0 {
		v.nextCallID = 1
	}
	token := v.nextCallID
	v.mem.WriteUint32Le(tokenPtr, token)

	req := &outbound{
		method:    method,
		url:       "http://" + addr + path,
		authority: authority,
		headers:   h,
		body:      append([]byte(nil), body...),
		trailers:  parsePairs(trl),
		timeout:   time.Duration(timeout) * time.Millisecond,
	}
	ctx, cancel := context.WithCancel(v.p.ctx)
	call := &pendingCall{token: token, cancel: cancel, vm: v}
	onClock := v.p.cfg.CallTimeoutsOnClock && !v.p.cfg.NoCallTimeouts && req.timeout > 0
	if onClock {
		call.due = v.p.clock.Now().Add(req.timeout)
	}
	if v.p.cfg.NoCallTimeouts || onClock {
		req.timeout = 0 // no real-time timeout
	}
	if v.calls == nil {
		v.calls = make(map[uint32]*pendingCall)
	}
	v.calls[token] = call
	started := v.p.goAsync(func() {
		defer call.end()
		defer cancel()
		resp := v.p.send(ctx, req)
		if resp == nil { // cancelled: the root context or the plugin is gone, or it timed out on the clock
			return
		}
		v.deliverCallResponse(call, resp)
	})
	if !started {
		call.end()
		cancel()
		delete(v.calls, token)
		return StatusInternalFailure
	}
	if onClock {
		v.p.clock.addCallTimeout(call)
	}
	return StatusOK
}

// timeOut answers call, if it is still outstanding, as Envoy's router answers a request past its
// timeout (a 504), and cancels its request. Clock.Advance calls it at the call's due time, without
// the clock's lock.
func (c *pendingCall) timeOut() {
	if c.vm.deliverCallResponse(c, synthesized(504, bodyTimeout)) {
		c.cancel()
		c.end()
	}
}

// outbound is an HTTP call's request, copied out of guest memory.
type outbound struct {
	method, url, authority string
	headers, trailers      Headers
	body                   []byte
	timeout                time.Duration // 0 = none
}

// send performs the request and maps the outcome the way Envoy's async client and
// router do (§3): a timeout is a 504 response, a failure before response headers (a
// refused or reset connection) a 503 response, a failure after them (or a body over
// the buffer limit) a failed call. It returns nil when ctx was cancelled.
func (p *Plugin) send(ctx context.Context, o *outbound) *callResponse {
	rctx := ctx
	if o.timeout > 0 {
		var cancel context.CancelFunc
		rctx, cancel = context.WithTimeout(ctx, o.timeout)
		defer cancel()
	}
	var body io.Reader
	if len(o.body) > 0 || len(o.trailers) > 0 {
		body = bytes.NewReader(o.body)
	}
	req, err := http.NewRequestWithContext(rctx, o.method, o.url, body)
	if err != nil {
		return synthesized(503, bodyConnectFailure)
	}
	req.Host = o.authority
	req.Header["User-Agent"] = []string{""} // Envoy adds none
	for _, kv := range o.headers {
		if strings.HasPrefix(kv[0], ":") || kv[0] == "host" {
			continue
		}
		req.Header.Add(kv[0], kv[1])
	}
	if len(o.body) > 0 {
		req.ContentLength = int64(len(o.body))
	}
	if len(o.trailers) > 0 {
		req.ContentLength = -1
		req.Trailer = make(http.Header)
		for _, kv := range o.trailers {
			req.Trailer.Add(kv[0], kv[1])
		}
	}
	resp, err := p.client.Do(req)
	if err != nil {
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, context.DeadlineExceeded):
			return synthesized(504, bodyTimeout)
		}
		var op *net.OpError
		if errors.As(err, &op) && op.Op == "dial" {
			return synthesized(503, bodyConnectFailure)
		}
		return synthesized(503, bodyTermination)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxCallResponseBody+1))
	if ctx.Err() != nil {
		return nil
	}
	if err != nil || len(data) > maxCallResponseBody {
		return &callResponse{failed: true}
	}
	out := &callResponse{body: data}
	out.headers = append(out.headers, [2]string{":status", strconv.Itoa(resp.StatusCode)})
	out.headers = appendHTTPHeaders(out.headers, resp.Header)
	if resp.ContentLength >= 0 {
		if _, ok := resp.Header["Content-Length"]; !ok {
			out.headers = append(out.headers, [2]string{"content-length", strconv.FormatInt(resp.ContentLength, 10)})
		}
	}
	out.trailers = appendHTTPHeaders(nil, resp.Trailer)
	return out
}

// appendHTTPHeaders appends h with lower-case names, sorted by name.
func appendHTTPHeaders(dst Headers, h http.Header) Headers {
	names := make([]string, 0, len(h))
	for k := range h {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		for _, val := range h[k] {
			dst = append(dst, [2]string{lower(k), val})
		}
	}
	return dst
}

// synthesized is a response Envoy's router makes up for an upstream failure.
func synthesized(status int, body string) *callResponse {
	return &callResponse{
		headers: Headers{
			{":status", strconv.Itoa(status)},
			{"content-length", strconv.Itoa(len(body))},
			{"content-type", "text/plain"},
		},
		body: []byte(body),
	}
}

// deliverCallResponse calls proxy_on_http_call_response on the root context, between
// guest calls, with the response readable only during the callback (§3). It reports whether
// the call was still outstanding (not answered, timed out or cancelled before).
func (v *VM) deliverCallResponse(call *pendingCall, r *callResponse) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.calls[call.token] != call {
		return false // answered, timed out or cancelled meanwhile
	}
	delete(v.calls, call.token)
	if !call.due.IsZero() {
		v.p.clock.removeCallTimeout(call)
	}
	if v.failed != nil || v.closed || v.ex.onHTTPCallResponse == nil {
		return true
	}
	var nh, nb, nt int
	if r.failed {
		v.status, v.statusMsg = StatusBrokenConnection, "reset"
	} else {
		v.status, v.statusMsg = StatusOK, ""
		v.callResp = r
		nh, nb, nt = len(r.headers), len(r.body), len(r.trailers)
	}
	v.call(v.ex.onHTTPCallResponse, "proxy_on_http_call_response", v.rootID,
		uint64(v.rootID), uint64(call.token), uint64(nh), uint64(nb), uint64(nt))
	v.callResp = nil
	v.runDeferred()
	return true
}

// deliverQueueReady calls proxy_on_queue_ready on the root context.
func (v *VM) deliverQueueReady(id uint32) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.failed != nil || v.closed || v.ex.onQueueReady == nil {
		return
	}
	v.call(v.ex.onQueueReady, "proxy_on_queue_ready", v.rootID, uint64(v.rootID), uint64(id))
	v.runDeferred()
}
