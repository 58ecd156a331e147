package filter

import (
	"time"

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
// request denied after all refunds them at once (refund). sent is when the check was sent: the
// reservation is no older, so its age (which decides whether a fixed window takes a refund) is never
// understated.
func (s *settler) reserveGlobal(h *httpContext, decisions []wire.Decision, sent int64) {
	for it, ds := range decidedItems(h.call.items, decisions) {
		if it.rs.rule.Settle() == nil {
			continue
		}
		charged := chargedMask(it.spec, ds)
		if charged == 0 {
			continue
		}
		if h.settle == nil {
			h.newSettling()
		}
		h.settle.res = append(h.settle.res, it.admission(charged, sent, ds))
		s.askReadable(h.settle, it.rs) // the request is still paused at its headers, unless at the body stage
	}
}

// settleGlobal sends delta units of a global reservation to the service: one settle entry per limit
// it charged, in one call whose answer is only checked for success.
func (s *settler) settleGlobal(r *reservation, delta, now int64) {
	g, m := s.g, r.rs.settleMetrics(s.host)
	if g == nil || g.breaker.open() { // no call, and no probe taken
		m.callFailed.inc(1)
		return
	}
	b, _ := s.appendEntries(wire.AppendSettleListStart(g.body[:0], false), 0, r, wire.AppendSettle, delta, time.Duration(max(now-r.at, 0)))
	g.body = wire.AppendRequestEnd(b)
	err := s.host.dispatch(g.cfg.Cluster, g.headers, g.body, g.timeout, func(numHeaders, _, _ int) {
		s.onSettleAnswer(m, numHeaders)
	})
	if err != nil {
		m.callFailed.inc(1)
		logf(s.host, logWarn, "meshlimit: rule %s: settling %d units in cluster %q: %v", r.rs.rule.Name, delta, g.cfg.Cluster, err)
	}
}

// onSettleAnswer counts a settle the service did not apply (anything but a 200; the answer's body,
// the settled count, is not needed). It runs only while the calling stream's context lives.
func (s *settler) onSettleAnswer(m *settleMetrics, numHeaders int) {
	defer s.panics.recoverPanic("a settle answer")
	if status := s.listStatus(numHeaders); status != "200" {
		m.callFailed.inc(1)
		if s.debugging() {
			logf(s.host, logDebug, "meshlimit: a settle was not applied (status %q)", status)
		}
	}
}

// chargeUnsent charges, when the stream ends, the global items that waited for a body that never
// came: each one (they all read their cost from the body) is charged its default, as a settle
// (which may put the key into debt), and counted as kept. The other global items of the request
// were decided with its headers.
func (s *settler) chargeUnsent(st *settling, now int64) {
	for i := range st.bodyItems {
		it := &st.bodyItems[i]
		def, _ := it.rs.rule.Cost(&s.d.req) // a request_json rule's cost before the body: its default
		r := reservation{rs: it.rs, key: it.key, at: now, spec: it.spec}
		for k := range it.spec {
			if k < 64 && it.spec[k].Concurrency == 0 {
				r.charged |= 1 << k
			}
		}
		if it.rs.rule.Scope == rules.ScopeGlobal { // both: counted once, with its local part
			it.rs.settleMetrics(s.host).kept.inc(1)
		}
		s.adjust(&r, def, now)
	}
}
