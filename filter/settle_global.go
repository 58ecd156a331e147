package filter

import (
	"time"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/meshlimit/meshlimit/abi"
	"github.com/meshlimit/meshlimit/rules"
	"github.com/meshlimit/meshlimit/wire"
)

// Reserve, then settle, on a global rule: the service decides the reservation like any cost (one
// descriptor per limit of the rule); the service's answer makes it a reservation of the stream,
// settled when the stream ends as a local one is (settle.go), except that the difference goes to the
// service: a call with a settle list (service/API.md, "Settles") made after the response and never
// waited for. Requests in flight together are admitted only while their reservations fit the
// service's counter, so they overshoot it by at most what they use beyond their reservations, and
// that over-run is charged to the key when they settle.
//
// A settle that cannot be applied keeps the reservation charged. The filter counts in
// settle_call_failed the settles it could not send (the breaker open: settles do not probe it; the
// cluster refused the call) and the answers other than 200 it sees; it does not see the answer to a
// settle sent as the stream ends, because the SDK drops an answer whose calling stream context is
// gone: the service's metrics (meshlimit_errors_total) count those failures. A request decided by
// the fallback limits, or by failure_mode, has no global reservation: nothing is settled.

// reserveGlobal records, from the service's answer, the reservations of the global rules that settle:
// the limits the service charged (an allowed decision; a denied or skipped one charged nothing). A
// request denied after all refunds them at once (refundSettles). sent is when the check was sent: the
// reservation is no older, so its age (which decides whether a fixed window takes a refund) is never
// understated.
func (h *httpContext) reserveGlobal(decisions []wire.Decision, sent int64) {
	j := 0
	for i := range h.globals {
		it := &h.globals[i]
		n := len(it.spec)
		if it.rs.rule.Settle() == nil || j+n > len(decisions) {
			j += n
			continue
		}
		var charged uint64
		for k := 0; k < n && k < 64; k++ {
			if d := &decisions[j+k]; d.Allowed && !d.Skipped && it.spec[k].Concurrency == 0 {
				charged |= 1 << k
			}
		}
		j += n
		if charged == 0 {
			continue
		}
		if h.settle == nil {
			h.settle = &settling{}
		}
		h.settle.res = append(h.settle.res, reservation{rs: it.rs, key: it.key, at: sent, reserved: it.cost, spec: it.spec, charged: charged})
		h.settle.askReadable(it.rs) // the request is still paused at its headers, unless at the body stage
	}
}

// settleGlobal sends delta units of a global reservation to the service: one settle entry per limit
// it charged, in one call whose answer is only checked for success.
func (p *pluginContext) settleGlobal(r *reservation, delta, now int64) {
	g, m := p.global, r.rs.settleMetrics()
	if g == nil || g.breaker.failures >= g.breaker.threshold { // open: no call, and no probe taken
		m.callFailed.Increment(1)
		return
	}
	b := wire.AppendSettleListStart(g.body[:0], false)
	n := 0
	for k := range r.spec {
		if k < 64 && r.charged&(1<<k) != 0 {
			key := wire.Key{Plugin: p.name, Rule: r.rs.rule.Name, Fingerprint: r.spec[k].Fingerprint, Value: r.key}
			b = wire.AppendSettle(b, n, key, r.spec[k].Limit, delta, time.Duration(max(now-r.at, 0)))
			n++
		}
	}
	g.body = wire.AppendRequestEnd(b)
	_, err := proxywasm.DispatchHttpCall(g.cfg.Cluster, g.headers, g.body, nil, g.timeout, func(numHeaders, _, _ int) {
		p.onSettleAnswer(m, numHeaders)
	})
	if err != nil {
		m.callFailed.Increment(1)
		proxywasm.LogWarnf("meshlimit: rule %s: settling %d units in cluster %q: %v", r.rs.rule.Name, delta, g.cfg.Cluster, err)
	}
}

// onSettleAnswer counts a settle the service did not apply (anything but a 200; the answer's body,
// the settled count, is not needed). It runs only while the calling stream's context lives.
func (p *pluginContext) onSettleAnswer(m *settleRule, numHeaders int) {
	defer p.recoverPanic("a settle answer")
	status := ""
	if numHeaders > 0 {
		headers, _ := proxywasm.GetHttpCallResponseHeaders()
		for _, hv := range headers {
			if hv[0] == ":status" {
				status = hv[1]
			}
		}
	}
	if status != "200" {
		m.callFailed.Increment(1)
		if p.cfg.LogLevel <= rules.LogDebug {
			proxywasm.LogDebugf("meshlimit: a settle was not applied (status %q)", status)
		}
	}
}

// A global rule that reserves from the request body (request_json) cannot be decided with the
// request headers. When one applies, every global item of the request waits for the body and goes
// in the one call made then (the local rules are decided with the headers as always, a local rule
// reading the body with the body): the headers continue, the body is held (StopIterationAndBuffer,
// at most the largest max_body of the rules reading it, plus what arrives while the call is out)
// until it ends or passes that bound, the reservations are read from it (a bad body reserves the
// default and counts bad_body, as locally), and the call is made with the request paused at the
// body stage; the answer resumes it (the held body goes on) or denies it (the local reply; the
// upstream, which may have seen the headers, is reset). A request whose headers end it reserves
// the default at once; one whose body never ends is charged the default of each such rule when the
// stream ends (a settle, which may put the key into debt), as locally.

// deferGlobal keeps the current request's global items for the body stage when one of them reads
// its cost from the request body, and reports whether it did.
func (h *httpContext) deferGlobal() bool {
	s := &h.plugin.scratch
	wants := false
	for i := range s.globals {
		wants = wants || s.globals[i].fromBody
	}
	if !wants {
		return false
	}
	if h.settle == nil {
		h.settle = &settling{}
	}
	h.settle.global = true
	h.globals = append(h.globals[:0], s.globals...)
	for i := range h.globals {
		h.settle.askReadable(h.globals[i].rs)
	}
	h.localOutcomes = append(h.localOutcomes[:0], s.outcomes...)
	h.delay = s.delay
	return true
}

// callWithBody decides a request whose global items waited for its body, read up to max_body
// (complete when it ended within): the local rules that waited for the body first, then every
// global item in one call (checkGlobal), which pauses the request at the body stage.
func (h *httpContext) callWithBody(body []byte, complete bool) types.Action {
	p, st := h.plugin, h.settle
	s := &p.scratch
	st.global, st.buffering = false, false
	now := abi.UnixNano()
	h.restoreScratch()
	s.resp.denier = nil
	s.globals = append(s.globals[:0], h.globals...)
	for i := range s.globals {
		if it := &s.globals[i]; it.fromBody {
			it.cost = p.bodyCost(it.rs, body, complete, it.rs.rule.Scope == rules.ScopeGlobal) // both: counted once, locally
		}
	}
	if h.decidePending(body, complete, now) {
		h.deny()
		return types.ActionPause
	}
	act := h.checkGlobal(now)
	if act == types.ActionPause && h.settle != nil {
		st.sent, st.buffering = true, true // waiting, or held by a shaping delay; a denial ended the stream
	}
	return act
}

// bodyWhileSent answers a body chunk that arrives after the body stage paused the request: held
// while the answer (or a shaping delay) is awaited, Envoy buffering it with what it holds; once the
// request was resumed, the held body went on and the chunk does too.
func (h *httpContext) bodyWhileSent(size int) types.Action {
	st := h.settle
	if h.held() {
		st.reqBytes = max(st.reqBytes, int64(size)) // the whole buffer (trailers come with size 0)
		return types.ActionPause
	}
	st.sent, st.buffering = false, false
	st.reqBytes += int64(size)
	return types.ActionContinue
}

// held reports whether the request waits for the service's answer or a shaping delay.
func (h *httpContext) held() bool {
	if h.deadline != 0 {
		return true
	}
	for _, r := range h.plugin.shaper.held {
		if r.stream == h.id {
			return true
		}
	}
	return false
}

// chargeUnsent charges, when the stream ends, the global items that waited for a body that never
// came: each one reading its cost from the body is charged its default, as a settle (which may put
// the key into debt), and counted as kept. The request was never decided: the other global items are
// not charged (it never reached the upstream but for its headers).
func (h *httpContext) chargeUnsent(now int64) {
	p := h.plugin
	for i := range h.globals {
		it := &h.globals[i]
		if !it.fromBody {
			continue
		}
		def, _ := it.rs.rule.Cost(&p.scratch.req) // a request_json rule's cost before the body: its default
		r := reservation{rs: it.rs, key: it.key, at: now, spec: it.spec}
		for k := range it.spec {
			if k < 64 && it.spec[k].Concurrency == 0 {
				r.charged |= 1 << k
			}
		}
		if it.rs.rule.Scope == rules.ScopeGlobal { // both: counted once, with its local part
			it.rs.settleMetrics().kept.Increment(1)
		}
		p.adjust(&r, def, now)
	}
}
