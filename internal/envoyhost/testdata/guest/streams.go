//go:build wasip1

package main

import (
	"strconv"
	"strings"
	"unsafe"
)

//go:wasmimport env proxy_set_buffer_bytes
func proxySetBufferBytes(typ, start, length uint32, ptr unsafe.Pointer, size uint32) uint32

//go:wasmimport env proxy_close_stream
func proxyCloseStream(dir uint32) uint32

// streamOps is what x-op stream asks of a stream's body callbacks, from the request headers:
//
//	x-req-action, x-resp-action  what the request / response body callbacks return, in turn (a
//	                             list like 2,2,0; the last value repeats; 0 by default)
//	x-release: tick              the next tick continues both directions of the stream
//	x-write: prepend:D, append:D, replace:D, first:D, mid:D
//	                             each response body callback writes D with proxy_set_buffer_bytes
//	x-close: request_body, response_body
//	                             that body callback closes the stream (proxy_close_stream)
//	x-reply-on: request_body, response_headers, response_body
//	                             that callback sends a local reply: 429, gRPC 8, body "over the limit"
//
// Metrics: req_body_calls, req_body_size (the sizes passed, summed), req_read (the bytes the
// callbacks could read), and resp_* alike; write_ok / write_bad_argument; tick_read_<status> (a
// read of the request body from the tick).
type streamOps struct {
	actions               [2][]uint32 // request, response
	calls                 [2]int
	release               bool
	write, close, replyOn string
}

// action is what the next body callback of direction typ returns.
func (o *streamOps) action(typ uint32) uint32 {
	as := o.actions[typ]
	i := min(o.calls[typ], len(as)-1)
	o.calls[typ]++
	if i < 0 {
		return 0
	}
	return as[i]
}

func actionList(s string) []uint32 {
	var out []uint32
	for _, f := range strings.Split(s, ",") {
		if n, err := strconv.Atoi(f); err == nil {
			out = append(out, uint32(n))
		}
	}
	return out
}

var (
	streamsOps  = map[uint32]*streamOps{}
	releaseNext []uint32
)

// startStream records the stream ops of request id.
func startStream(id uint32, get func(string) string) {
	o := &streamOps{actions: [2][]uint32{actionList(get("x-req-action")), actionList(get("x-resp-action"))}, release: get("x-release") == "tick",
		write: get("x-write"), close: get("x-close"), replyOn: get("x-reply-on")}
	streamsOps[id] = o
	if o.release {
		releaseNext = append(releaseNext, id)
	}
}

// releaseHeld continues the streams that asked for it, from the tick; it reads the request body
// first, which only a buffering filter may still do.
func releaseHeld() {
	for _, id := range releaseNext {
		if proxySetEffectiveContext(id) != 0 {
			continue
		}
		st, _ := buffer(0, 1<<20)
		incMetric("tick_read_"+itoa(st), 1)
		proxyContinueStream(0)
		proxyContinueStream(1)
	}
	releaseNext = releaseNext[:0]
}

func limitReply() {
	body, d := "over the limit", "message_limit"
	h := pairs("x-limit", "messages")
	proxySendLocalResponse(429, ptrOf(d), uint32(len(d)), ptrOf(body), uint32(len(body)), unsafe.Pointer(&h[0]), uint32(len(h)), 8)
}

// streamBody is a body callback of a stream with ops: it counts, reads what it may, acts.
func streamBody(o *streamOps, typ, size uint32) uint32 {
	prefix, where := "req_", "request_body"
	if typ == 1 {
		prefix, where = "resp_", "response_body"
	}
	incMetric(prefix+"body_calls", 1)
	incMetric(prefix+"body_size", int64(size))
	if _, b := buffer(typ, size); len(b) > 0 {
		incMetric(prefix+"read", int64(len(b)))
	}
	if typ == 1 && o.write != "" {
		writeBody(o.write, size)
	}
	if o.close == where {
		proxyCloseStream(typ)
	}
	if o.replyOn == where {
		limitReply()
	}
	return o.action(typ)
}

// writeBody applies x-write to the response body.
func writeBody(spec string, size uint32) {
	how, data, _ := strings.Cut(spec, ":")
	at := map[string][2]uint32{
		"prepend": {0, 0}, "append": {1 << 31, 0}, "replace": {0, 1 << 31}, "first": {0, 1}, "mid": {1, 0},
	}[how]
	if how == "mid" && size < 2 {
		return
	}
	if proxySetBufferBytes(1, at[0], at[1], ptrOf(data), uint32(len(data))) == 0 {
		incMetric("write_ok", 1)
	} else {
		incMetric("write_bad_argument", 1)
	}
}
