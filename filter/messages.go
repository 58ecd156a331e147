package filter

import (
	"bytes"
	"math"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/meshlimit/meshlimit/messages"
	"github.com/meshlimit/meshlimit/rules"
)

// The body results beyond the SDK's two (docs/envoy-host.md §13): Envoy passes them through.
const (
	// actionWatermark is StopIterationAndWatermark: the chunk is held in Envoy's buffer, and past
	// the buffer limit Envoy stops reading from the sender instead of failing the stream.
	actionWatermark types.Action = 2
	// actionDrop is StopIterationNoBuffer: the chunk is dropped.
	actionDrop types.Action = 3
)

// The protocols of a stream whose messages a rule counts.
const (
	protoNone      uint8 = iota
	protoGRPC            // application/grpc, application/grpc+*
	protoWSPending       // a WebSocket upgrade before its answer
	protoWS              // a WebSocket after its 101
)

// msgScratch is what decide collects for the stream's message limit: the first matching rule with
// rules[].messages, its limit set and key (in the decision's buffer).
type msgScratch struct {
	rule     *ruleState
	set      int
	key      []byte
	enforced bool
}

func (s *msgScratch) reset() { s.rule, s.key = nil, s.key[:0] }

// msgStream is the message limiter's part of a stream: the rule that counts its messages, the
// key of its bucket and one framer per direction. reset keeps the key's and the records' arrays.
type msgStream struct {
	rule     *ruleState // nil: no message limit applies
	set      int
	key      []byte // the bucket's key; a direction byte is appended past base
	base     int
	cost     int64
	proto    uint8
	enforced bool
	started  bool // the response headers arrived
	ended    bool // the stream was ended: every later chunk is dropped
	draining bool // but the server's chunks pass: its close frame goes to the client
	dirs     [2]msgDir
}

func (m *msgStream) reset() {
	*m = msgStream{key: m.key[:0], dirs: [2]msgDir{{rec: m.dirs[0].rec[:0]}, {rec: m.dirs[1].rec[:0]}}}
}

// msgDir is one direction of a counted stream.
type msgDir struct {
	grpc  messages.GRPC
	ws    messages.WebSocket
	owed  int64 // messages received and not charged yet: what a hold waits to charge
	held  bool
	since int64  // when the hold began (unix ns)
	due   int64  // when the hold next tries to charge
	rec   []byte // per_stream: the direction's own bucket, kept in this VM (no shared-data slot)
}

// feed counts the messages that start in chunk.
func (d *msgDir) feed(proto uint8, chunk []byte) (int, error) {
	if proto == protoGRPC {
		return d.grpc.Feed(chunk)
	}
	return d.ws.Feed(chunk)
}

// boundary returns the offset in chunk of the first byte of its k-th message (k from 0), fed to
// a framer in the state before (what d was before chunk).
func (d *msgDir) boundary(proto uint8, chunk []byte, k int) int {
	at, off := -1, 0
	for i := 0; i <= k; i++ {
		var ok bool
		if proto == protoGRPC {
			at, ok = d.grpc.Next(chunk[off:])
		} else {
			at, ok = d.ws.Next(chunk[off:])
		}
		if !ok {
			return len(chunk)
		}
		at += off
		off = at + 1
	}
	return at
}

// counts reports whether the stream's messages of direction p are counted.
func (m *msgStream) counts(p part) bool {
	if m.rule == nil || m.proto == protoNone {
		return false
	}
	ml := m.rule.rule.Messages()
	if p == requestPart {
		return ml.Request
	}
	return ml.Response && m.proto != protoWSPending
}

// dirKey returns the bucket's key for direction p: each direction has its own bucket.
func (m *msgStream) dirKey(p part) []byte {
	m.key = append(m.key[:m.base], 0, "><"[p])
	return m.key
}

// keep gives the stream being decided the message limit decide found, when the stream speaks a
// protocol the rule counts; the limiter then counts its bodies' messages instead of the request.
func (m *messageLimiter) keep(h *httpContext) {
	s := &m.d.msgs
	if s.rule == nil {
		return
	}
	ml, ms := s.rule.rule.Messages(), &h.msgs
	ms.proto = m.protocol(ml)
	if ms.proto == protoNone {
		return
	}
	ms.rule, ms.set, ms.enforced = s.rule, s.set, s.enforced
	ms.key = append(ms.key[:0], s.key...)
	ms.base = len(ms.key)
	ms.cost, _ = s.rule.rule.Cost(nil)
	ms.dirs[requestPart].ws.FromClient = true
}

// protocol returns the protocol of the current request among those ml counts.
func (m *messageLimiter) protocol(ml *rules.Messages) uint8 {
	if ml.GRPC {
		if ct, ok := m.host.header(requestPart, "content-type", m.buf[:0]); ok && isGRPC(ct) {
			m.buf = ct[:0]
			return protoGRPC
		}
	}
	if ml.WebSocket {
		if up, ok := m.host.header(requestPart, "upgrade", m.buf[:0]); ok && bytes.EqualFold(bytes.TrimSpace(up), []byte("websocket")) {
			m.buf = up[:0]
			return protoWSPending
		}
	}
	return protoNone
}

// isGRPC reports whether a content-type is counted as gRPC: application/grpc, or
// application/grpc+<subtype> (not application/grpc-web), in any case, parameters allowed. That
// is a little wider than Envoy's case-sensitive check without parameters (docs/envoy-host.md §13):
// it errs towards counting.
func isGRPC(ct []byte) bool {
	const g = "application/grpc"
	if len(ct) < len(g) || !bytes.EqualFold(ct[:len(g)], []byte(g)) {
		return false
	}
	rest := ct[len(g):]
	return len(rest) == 0 || rest[0] == '+' || rest[0] == ';'
}

// responseHeaders notes that the response started and settles a WebSocket upgrade: a 101 starts
// the session's framing (with permessage-deflate when the server accepted it), anything else
// means the stream is not a WebSocket.
func (m *messageLimiter) responseHeaders(h *httpContext) {
	ms := &h.msgs
	if ms.rule == nil {
		return
	}
	ms.started = true
	if ms.proto != protoWSPending {
		return
	}
	st, ok := m.host.header(responsePart, ":status", m.buf[:0])
	if !ok || string(st) != "101" {
		ms.proto = protoNone
		return
	}
	ext, _ := m.host.header(responsePart, "sec-websocket-extensions", st[:0])
	deflate := bytes.Contains(bytes.ToLower(ext), []byte("permessage-deflate"))
	m.buf = ext[:0]
	ms.proto = protoWS
	ms.dirs[requestPart].ws.Deflate, ms.dirs[responsePart].ws.Deflate = deflate, deflate
}

// body counts the messages of a chunk of direction p and charges them. It reports whether it
// decided the chunk's fate (held, dropped, ended), with the action; false lets the other features
// see the chunk.
func (m *messageLimiter) body(h *httpContext, p part, size int) (types.Action, bool) {
	ms := &h.msgs
	if ms.ended && ms.rule != nil {
		if ms.draining && p == responsePart {
			return types.ActionContinue, true
		}
		return actionDrop, true
	}
	if !ms.counts(p) {
		return types.ActionContinue, false
	}
	d := &ms.dirs[p]
	if size == 0 {
		return m.heldOr(d)
	}
	chunk, ok := m.host.chunk(p, size, m.in)
	if !ok {
		logf(m.host, logWarn, "meshlimit: rule %s: the host refused to hand a streamed body chunk; the stream is reset", ms.rule.rule.Name)
		return m.reset(h), true
	}
	if cap(chunk) <= maxKeptChunk { // the next chunk lands here
		m.in = chunk[:0]
	}
	before := *d
	n, err := d.feed(ms.proto, chunk)
	m.metrics.counted.inc(uint64(n))
	if err != nil {
		m.metrics.malformed.inc(1)
		if m.debugging() {
			logf(m.host, logDebug, "meshlimit: rule %s: stream %d: %v; the stream is reset", ms.rule.rule.Name, h.id, err)
		}
		return m.reset(h), true
	}
	d.owed += int64(n)
	if d.held {
		return m.heldMore(h, p, chunk, &before)
	}
	if d.owed == 0 {
		return types.ActionContinue, false
	}
	now := m.host.now()
	retry := m.pay(ms, p, d, now)
	if d.owed == 0 {
		return types.ActionContinue, false
	}
	if ms.rule.rule.Messages().OnLimit == rules.MessagesEnd || m.never(ms, d) {
		return m.end(h, p, chunk, &before, n-int(d.owed)), true
	}
	m.hold(h, p, now, retry)
	return actionWatermark, true
}

// heldMore holds a chunk of a held direction (the tick resumes it), unless the direction now
// owes more than its limits admit within max_hold: then the stream ends at once. A WebSocket is
// reset (a close frame in this chunk would release the held ones uncharged).
func (m *messageLimiter) heldMore(h *httpContext, p part, chunk []byte, before *msgDir) (types.Action, bool) {
	ms := &h.msgs
	if !m.never(ms, &ms.dirs[p]) {
		return actionWatermark, true
	}
	if ms.proto == protoGRPC {
		return m.end(h, p, chunk, before, 0), true
	}
	ms.rule.metrics.limited.inc(1)
	return m.reset(h), true
}

// never reports whether direction d owes more messages than the stream's limits can admit
// within max_hold (rules.AdmitsWithin, of the key's own limits and of the overflow's): a hold
// could only end in a reset at max_hold, so the stream is ended now instead.
func (m *messageLimiter) never(ms *msgStream, d *msgDir) bool {
	if !ms.enforced {
		return false
	}
	r := ms.rule.rule
	hold := r.Messages().MaxHold
	most := rules.AdmitsWithin(r.LimitSets()[ms.set].Limits, hold)
	if !r.Messages().PerStream && ms.rule.overflow != nil {
		most = max(most, rules.AdmitsWithin(ms.rule.overflow, hold))
	}
	return most < math.MaxInt64 && d.owed > most/max(ms.cost, 1)
}

// heldOr holds a chunk of a held direction (the tick resumes it), and lets any other go on.
func (m *messageLimiter) heldOr(d *msgDir) (types.Action, bool) {
	if d.held {
		return actionWatermark, true
	}
	return types.ActionContinue, false
}

// trailers reports whether trailers of direction p must wait: they follow the body a hold keeps.
func (m *messageLimiter) trailers(h *httpContext, p part) bool {
	return h.msgs.rule != nil && h.msgs.dirs[p].held
}
