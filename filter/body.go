package filter

import (
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/meshlimit/meshlimit/abi"
	"github.com/meshlimit/meshlimit/rules"
	"github.com/meshlimit/meshlimit/sharedstate"
)

// OnHttpRequestBody implements types.HttpContext. Only a stream with reservations looks at the
// request body: it counts the bytes, and while a rule waits to reserve from the body it holds the
// body (StopIterationAndBuffer: Envoy then calls again with size the whole buffered body) until it
// ends or passes max_body. A panic is recovered: the body goes on.
func (h *httpContext) OnHttpRequestBody(size int, eos bool) (act types.Action) {
	defer func() {
		if r := recover(); r != nil {
			h.plugin.recovered("the request body", r)
			act = types.ActionContinue
		}
	}()
	st := h.settle
	if st == nil {
		return types.ActionContinue
	}
	if st.buffering {
		st.reqBytes = int64(size) // the buffered body, this chunk included
	} else {
		st.reqBytes += int64(size)
	}
	if len(st.pend) == 0 {
		return types.ActionContinue
	}
	limit := 0
	for _, pb := range st.pend {
		limit = max(limit, pb.rs.rule.MaxBody())
	}
	if !eos && size <= limit {
		st.buffering = true
		return types.ActionPause
	}
	st.buffering = false
	var body []byte
	if size <= limit {
		body, _ = proxywasm.GetHttpRequestBody(0, size)
	}
	if h.decideBodies(body, eos && size <= limit) {
		return types.ActionPause // denied: the local reply is on its way
	}
	return types.ActionContinue
}

// decideBodies decides the rules that waited for the request body, in order, and reports whether
// one denied the request (then every reservation of the request is refunded and the local reply is
// sent).
func (h *httpContext) decideBodies(body []byte, complete bool) (denied bool) {
	p, st := h.plugin, h.settle
	s := &p.scratch
	s.outcomes = s.outcomes[:0]
	now := abi.UnixNano()
	for _, pb := range st.pend {
		r := pb.rs.rule
		cost, err := r.BodyCost(body, complete)
		if err != nil {
			pb.rs.settleMetrics().badBody.Increment(1)
			if p.cfg.LogLevel <= rules.LogDebug {
				proxywasm.LogDebugf("meshlimit: rule %s: request body: %v; reserving %d", r.Name, err, cost)
			}
		}
		if denied = p.decideReserved(st, pb, cost, now); denied {
			break
		}
	}
	st.pend = st.pend[:0]
	if !denied {
		if len(s.outcomes) > 0 && p.cfg.Response.QuotaHeadersOnAllowed {
			h.quota = append(h.quota, s.outcomes...) // the response reports these limits too
		}
		return false
	}
	s.req.reset() // deny reads this request's headers
	h.deny()      // refunds the request's reservations (refundSettles)
	return true
}

// decideReserved takes a body reservation as decide takes a request's cost, and reports whether it
// denies the request (enforced).
func (p *pluginContext) decideReserved(st *settling, pb pendingBody, cost, now int64) bool {
	rs, r := pb.rs, pb.rs.rule
	enforced := p.cfg.Enforce && !r.Shadow && r.EnforcedForString(pb.key)
	out, err := p.limiter.Take(rs.tables[pb.set], []byte(pb.key), now, cost)
	if err != nil {
		if err != sharedstate.ErrContention {
			proxywasm.LogWarnf("meshlimit: rule %s: %v", r.Name, err)
		}
		return r.FailureMode == rules.FailDeny && enforced
	}
	p.count(rs, out.Allowed, enforced)
	if out.Allowed {
		st.res = append(st.res, reservation{rs: rs, set: pb.set, key: pb.key, placement: out.Placement, at: now, reserved: cost})
	}
	if enforced {
		specs := rs.placed(out.Placement, r.LimitSets()[pb.set].Limits)
		pk := p.cfg.Response.PartitionString(r, pb.key)
		for j := range specs {
			p.scratch.outcomes = append(p.scratch.outcomes, rules.Outcome{Limit: &specs[j], Decision: out.Decisions[j], Partition: pk})
		}
	}
	return enforced && !out.Allowed
}

// OnHttpResponseBody implements types.HttpContext. Only a stream with reservations looks at the
// response body: it counts the bytes and copies what a JSON field needs (at most max_body bytes, or
// one SSE event at a time), while the body passes on. A panic is recovered: the body goes on.
func (h *httpContext) OnHttpResponseBody(size int, eos bool) types.Action {
	defer h.plugin.recoverPanic("the response body")
	st := h.settle
	if st == nil {
		return types.ActionContinue
	}
	st.respBytes += int64(size)
	st.respEnded = eos
	if !st.readJSON || st.status >= 500 || size == 0 {
		return types.ActionContinue
	}
	if !st.sse && (st.cut || len(st.body)+size > st.maxBody) {
		st.cut, st.body = true, nil
		return types.ActionContinue
	}
	chunk, err := proxywasm.GetHttpResponseBody(0, size)
	if err != nil {
		return types.ActionContinue
	}
	if !st.sse {
		st.body = append(st.body, chunk...)
		return types.ActionContinue
	}
	st.events.Write(chunk, st.onEvent)
	if eos {
		st.events.Close(st.onEvent)
	}
	return types.ActionContinue
}

// onEvent reads the JSON fields of the reservations from one SSE event's data: the last event
// that carries a field settles it.
func (st *settling) onEvent(data []byte) {
	for i := range st.res {
		r := &st.res[i]
		if s := r.rs.rule.Settle(); s.Source == rules.SettleResponseJSON {
			if n, err := rules.JSONInt(data, s.Path); err == nil {
				r.value, r.found = r.rs.rule.SettledValue(n), true
			}
		}
	}
}
