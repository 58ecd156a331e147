package filter

import (
	"time"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/meshlimit/meshlimit/messages"
)

// closing is a WebSocket whose close frame went out: it is reset at the tick at or after at.
type closing struct {
	stream uint32
	at     int64
}

// closeGrace is how long a server that was sent a close frame for its client's message over the
// limit has to send its own close frame (which it echoes with the code, RFC 6455 §5.5.1) before
// the stream is reset: until then the server's bytes still reach the client.
const closeGrace = time.Second

// closeCode is the code of the close frames the limiter writes: 1008, policy violation.
const closeCode = 1008

// end ends a stream whose message over the limit is in chunk, the (allowed+1)-th message that
// starts there, with the framer as it was before the chunk (docs/envoy-host.md §13):
//   - gRPC whose response has not started: a trailers-only RESOURCE_EXHAUSTED;
//   - a WebSocket client's message before any response (the upgrade not yet answered): a local
//     HTTP 429; the upstream request is reset by Envoy, so nothing of the session reaches it;
//   - a WebSocket server's message: the messages before it, then a close frame 1008 toward the
//     client in their place, and a reset at the next tick;
//   - a WebSocket client's message: the messages before it, then a (masked) close frame 1008
//     toward the server in their place; the server's close frame, which echoes the code, still
//     reaches the client, and the stream is reset after closeGrace;
//   - anything else (gRPC once the response started): a reset, the cleanest end Envoy allows.
func (m *messageLimiter) end(h *httpContext, p part, chunk []byte, before *msgDir, allowed int) types.Action {
	ms := &h.msgs
	ms.rule.metrics.limited.inc(1)
	switch {
	case ms.proto == protoGRPC && !ms.started:
		ms.ended = true
		m.metrics.ended.inc(1)
		e := messages.ResourceExhausted(messageLimitText)
		reply(m.host, e.HTTPStatus, nil, []byte(e.Message), int32(e.GRPCStatus))
		return types.ActionPause
	case ms.proto == protoWSPending && !ms.started:
		ms.ended = true
		m.metrics.ended.inc(1)
		reply(m.host, 429, nil, []byte(messageLimitText), -1)
		return types.ActionPause
	case ms.proto == protoWS:
		return m.closeWS(h, p, chunk[:before.boundary(ms.proto, chunk, allowed)])
	}
	return m.reset(h)
}

// closeWS replaces the current chunk of direction p with its allowed part and a close frame, and
// schedules the stream's reset.
func (m *messageLimiter) closeWS(h *httpContext, p part, allowed []byte) types.Action {
	ms := &h.msgs
	out := append(m.out[:0], allowed...)
	at := m.host.now()
	if p == requestPart {
		out = appendMaskedClose(out, uint32(at)|1)
		at += int64(closeGrace)
		ms.draining = true
	} else {
		out, _ = messages.AppendClose(out, closeCode, messageLimitText)
	}
	m.out = out[:0]
	if err := m.host.setBody(p, out); err != nil {
		return m.reset(h)
	}
	ms.ended = true
	m.metrics.ended.inc(1)
	m.closing = append(m.closing, closing{h.id, at})
	return types.ActionContinue
}

// appendMaskedClose appends a close frame 1008 as a client sends it: masked with key (RFC 6455
// §5.3; the key need not be unpredictable here, the frame's bytes are the proxy's own).
func appendMaskedClose(dst []byte, key uint32) []byte {
	start := len(dst)
	dst, _ = messages.AppendClose(dst, closeCode, messageLimitText)
	payload := append([]byte(nil), dst[start+2:]...)
	k := [4]byte{byte(key >> 24), byte(key >> 16), byte(key >> 8), byte(key)}
	dst = append(dst[:start+1], dst[start+1]|0x80)
	dst = append(dst, k[:]...)
	for i, b := range payload {
		dst = append(dst, b^k[i%4])
	}
	return dst
}

// resetClosed resets the streams whose close frame went out and whose time came.
func (m *messageLimiter) resetClosed(now int64) {
	kept := m.closing[:0]
	for _, c := range m.closing {
		if c.at > now {
			kept = append(kept, c)
			continue
		}
		if m.host.enter(c.stream) {
			m.host.closeStream()
		}
	}
	m.closing = kept
}

// messageLimitText is the message of an ended stream (grpc-message, the close frame's reason).
const messageLimitText = "message rate limit exceeded"

// reset ends the current stream h with a reset, and drops its chunk.
func (m *messageLimiter) reset(h *httpContext) types.Action {
	h.msgs.ended = true
	m.metrics.ended.inc(1)
	m.host.closeStream()
	return actionDrop
}
