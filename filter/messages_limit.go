package filter

import (
	"time"

	"github.com/meshlimit/meshlimit/algorithms"
	"github.com/meshlimit/meshlimit/rules"
	"github.com/meshlimit/meshlimit/sharedstate"
)

// messageLimiter enforces the rules with rules[].messages: it counts the messages of each gRPC
// stream and WebSocket session the rule matched (package messages, one framer per direction),
// charges them to the key's bucket in shared data as they arrive, and at the limit either holds
// the direction (shape) or ends the stream (end). A hold returns StopIterationAndWatermark for
// every chunk, so Envoy keeps the bytes and its flow control stops the sender (the guest buffers
// nothing), and the tick charges what is owed and resumes the direction; a hold longer than
// max_hold ends the stream. docs/envoy-host.md §13 says what Envoy allows; docs/configuration.md
// what a client sees.
type messageLimiter struct {
	*env
	any     bool      // some rule counts messages: the plugin needs the tick
	held    []heldDir // the directions a hold keeps, in no order
	closing []closing // streams to reset once a close frame went out
	buf     []byte    // header values
	in      []byte    // the chunk being counted (kept up to maxKeptChunk)
	out     []byte    // a chunk rewritten to end a WebSocket
	metrics messageMetrics
}

type heldDir struct {
	h *httpContext
	p part
}

type messageMetrics struct {
	counted, holds, ended, malformed counter
	held                             gauge // moved by deltas (heldBy)
}

// start readies the limiter; it defines its metrics only when a rule counts messages.
func (m *messageLimiter) start(e *env, rs []ruleState) {
	*m = messageLimiter{env: e}
	for i := range rs {
		m.any = m.any || rs[i].rule.Messages() != nil
	}
	if !m.any {
		return
	}
	m.metrics = messageMetrics{
		counted:   newCounter(m.host, "meshlimit.messages.counted"),
		holds:     newCounter(m.host, "meshlimit.messages.holds"),
		ended:     newCounter(m.host, "meshlimit.messages.ended"),
		malformed: newCounter(m.host, "meshlimit.messages.malformed"),
		held:      newGauge(m.host, "meshlimit.messages.held"),
	}
}

// adopt takes the message rule decide is at: its stream's messages are charged, not the
// request. The first matching message rule of a request applies; later ones are ignored.
func (m *messageLimiter) adopt(rs *ruleState, set *rules.LimitSet, key []byte, enforced bool) {
	s := &m.d.msgs
	if s.rule != nil {
		return
	}
	s.rule, s.set, s.enforced = rs, set.Index, enforced
	s.key = append(s.key[:0], key...)
}

// maxKeptChunk is the largest chunk buffer the limiter keeps for the next chunk: chunks up to it
// (a socket read, an HTTP/2 DATA frame) are read without allocating; a larger one is let go.
const maxKeptChunk = 256 << 10

// maxPayRounds bounds the one-message charges a chunk or a tick tries after its whole debt was
// refused: a tick's CPU per held direction is bounded, and the rest waits for the next tick.
const maxPayRounds = 16

// maxDebt caps the cost of one charge (a chunk of many tiny messages), far under int64's range.
const maxDebt = 1 << 20

// pay charges what direction d owes: all at once, or else one message at a time, and returns
// how long the bucket asks to wait for the next message when something is still owed.
func (m *messageLimiter) pay(ms *msgStream, p part, d *msgDir, now int64) (retry int64) {
	key := ms.dirKey(p)
	if ok, _ := m.take(ms, d, key, now, min(d.owed, maxDebt)); ok && d.owed == 0 {
		return 0
	}
	for i := 0; i < maxPayRounds && d.owed > 0; i++ {
		ok, wait := m.take(ms, d, key, now, 1)
		if !ok {
			retry = wait
			break
		}
	}
	if d.owed > 0 && !ms.enforced { // a shadow rule counts what it would hold, and holds nothing
		ms.rule.metrics.shadowLimited.inc(uint64(d.owed))
		d.owed, retry = 0, 0
	}
	return retry
}

// take charges n of the direction's owed messages to its bucket and reports whether the bucket
// admitted them (then they are no longer owed), else how long it asks to wait. A failed update
// follows the rule's failure_mode. A per_stream bucket is the direction's own record in this VM
// (a stream never leaves its worker): it takes no slot of the key table, so however many streams
// one client opens, no other key is crowded into the table's overflow state.
func (m *messageLimiter) take(ms *msgStream, d *msgDir, key []byte, now, n int64) (bool, int64) {
	rs := ms.rule
	var out sharedstate.Outcome
	var err error
	if rs.rule.Messages().PerStream {
		out, err = m.limiter.TakeLocal(rs.tables[ms.set], &d.rec, now, n*ms.cost)
	} else {
		out, err = m.limiter.Take(rs.tables[ms.set], key, now, n*ms.cost)
	}
	if (out.Attempts > 1 || err != nil) && m.updated(rs, out.Attempts, err) != nil {
		if rs.failed(ms.enforced) {
			return false, int64(shapeTickMillis * time.Millisecond)
		}
		out.Allowed = true
	}
	rs.countPlaced(out.Placement)
	if !out.Allowed {
		return false, retryOf(out.Decisions)
	}
	rs.metrics.allowed.inc(uint64(n))
	d.owed -= n
	return true, 0
}

// retryOf is how long the denied limits ask to wait: a message whose cost no limit can ever
// admit waits forever (the hold's bound ends the stream).
func retryOf(ds []algorithms.Decision) int64 {
	var w time.Duration
	for i := range ds {
		if !ds[i].Allowed {
			if ds[i].RetryAfter == algorithms.RetryNever {
				return int64(time.Hour) // past every max_hold
			}
			w = max(w, ds[i].RetryAfter)
		}
	}
	return int64(w)
}

// hold keeps direction p of h until the tick has charged what it owes.
func (m *messageLimiter) hold(h *httpContext, p part, now, retry int64) {
	d := &h.msgs.dirs[p]
	d.held, d.since, d.due = true, now, now+retry
	h.msgs.rule.metrics.limited.inc(1)
	m.metrics.holds.inc(1)
	m.held = append(m.held, heldDir{h, p})
	m.heldBy(1)
}

// tick resets the streams whose close frame went out, and charges and resumes the held
// directions that are due; a direction held past max_hold ends its stream.
func (m *messageLimiter) tick(now int64) {
	if !m.any {
		return
	}
	m.resetClosed(now)
	if len(m.held) == 0 {
		return
	}
	kept := m.held[:0]
	for _, hd := range m.held {
		if m.release(hd, now) {
			continue
		}
		kept = append(kept, hd)
	}
	m.heldBy(len(kept) - len(m.held))
	clear(m.held[len(kept):])
	m.held = kept
}

// heldBy moves the held gauge by delta. The gauge is one stat for every worker, so each moves it
// by its own changes.
func (m *messageLimiter) heldBy(delta int) {
	if delta != 0 {
		m.host.addMetric(m.metrics.held.id, int64(delta))
	}
}

// release tries to end the hold of hd at now and reports whether it ended (resumed, or the
// stream was ended).
func (m *messageLimiter) release(hd heldDir, now int64) bool {
	ms := &hd.h.msgs
	d := &ms.dirs[hd.p]
	if ms.ended { // the other direction ended the stream: what this one holds never goes on
		d.held = false
		return true
	}
	if d.due <= now {
		retry := m.pay(ms, hd.p, d, now)
		if d.owed == 0 {
			d.held = false
			if m.host.enter(hd.h.id) {
				m.host.resume(hd.p)
			}
			return true
		}
		d.due = now + retry
	}
	if now-d.since < int64(ms.rule.rule.Messages().MaxHold) {
		return false
	}
	d.held = false
	if m.host.enter(hd.h.id) {
		m.reset(hd.h)
	}
	return true
}

// endStream forgets the holds of a stream that ended (the context is recycled after).
func (m *messageLimiter) endStream(h *httpContext) {
	ms := &h.msgs
	if !ms.dirs[requestPart].held && !ms.dirs[responsePart].held {
		return
	}
	kept := m.held[:0]
	for _, hd := range m.held {
		if hd.h != h {
			kept = append(kept, hd)
		}
	}
	m.heldBy(len(kept) - len(m.held))
	clear(m.held[len(kept):])
	m.held = kept
	ms.dirs[requestPart].held, ms.dirs[responsePart].held = false, false
}
