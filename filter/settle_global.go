package filter

import (
	"time"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm"

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
