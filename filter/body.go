package filter

import (
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/meshlimit/meshlimit/abi"
	"github.com/meshlimit/meshlimit/rules"
	"github.com/meshlimit/meshlimit/rules/body"
	"github.com/meshlimit/meshlimit/sharedstate"
)

// OnHttpRequestBody implements types.HttpContext. Only a stream with reservations looks at the
// request body: it counts the bytes, and while a rule waits to reserve from the body it holds the
// body (StopIterationAndBuffer: Envoy then calls again with size the whole buffered body) until it
// ends or passes max_body. When global items that read the body wait for it too, their call to the
// service is made then, and the body stays held until the answer resumes the request
// (settle_global.go). A panic is recovered: the body goes on.
func (h *httpContext) OnHttpRequestBody(size int, eos bool) (act types.Action) {
	defer h.plugin.recoverContinue("the request body", &act)
	st := h.settle
	if st == nil {
		return types.ActionContinue
	}
	if st.sent {
		return h.bodyWhileSent(size)
	}
	if st.buffering {
		st.reqBytes = int64(size) // the buffered body, this chunk included
	} else {
		st.reqBytes += int64(size)
	}
	if len(st.pend) == 0 && !st.global {
		return types.ActionContinue
	}
	limit := h.bodyLimit()
	if !eos && size <= limit {
		st.buffering = true
		return types.ActionPause
	}
	var body []byte
	if size <= limit {
		body, _ = proxywasm.GetHttpRequestBody(0, size)
	}
	return h.bodyRead(body, eos && size <= limit)
}

// OnHttpRequestTrailers implements types.HttpContext. Trailers end a request whose body did not
// (gRPC, or a body sent without end_of_stream): the rules still waiting for the body decide now,
// from the body held so far (Envoy still offers it to the filter that buffered it), instead of
// letting it through undecided. A client that ends its body with trailers reserves what the body
// says, as one that ends it with end_of_stream does.
func (h *httpContext) OnHttpRequestTrailers(int) (act types.Action) {
	defer h.plugin.recoverContinue("the request trailers", &act)
	st := h.settle
	switch {
	case st == nil:
		return types.ActionContinue
	case st.sent:
		return h.bodyWhileSent(0)
	case len(st.pend) == 0 && !st.global:
		return types.ActionContinue
	}
	body, complete := h.heldBody()
	return h.bodyRead(body, complete)
}

// heldBody returns the request body the filter holds when trailers end it, and whether it is whole
// (within the bound of the rules that read it, and readable).
func (h *httpContext) heldBody() ([]byte, bool) {
	st := h.settle
	if !st.buffering || st.reqBytes == 0 {
		return nil, st.reqBytes == 0 // no body at all: an empty one
	}
	if st.reqBytes > int64(h.bodyLimit()) {
		return nil, false
	}
	body, err := proxywasm.GetHttpRequestBody(0, int(st.reqBytes))
	return body, err == nil && len(body) == int(st.reqBytes)
}

// bodyRead decides the rules that waited for the body, read up to max_body (complete when it ended
// within), and returns the action of the body (or trailers) callback.
func (h *httpContext) bodyRead(body []byte, complete bool) types.Action {
	st := h.settle
	if st.global {
		return h.callWithBody(body, complete) // settle_global.go
	}
	st.buffering = false
	if h.decideBodies(body, complete) {
		return types.ActionPause // denied: the local reply is on its way
	}
	return types.ActionContinue
}

// bodyLimit is the most body bytes a rule that waits for the body reads.
func (h *httpContext) bodyLimit() int {
	limit := 0
	for _, pb := range h.settle.pend {
		limit = max(limit, pb.rs.rule.MaxBody())
	}
	if h.settle.global {
		for i := range h.settle.bodyItems {
			limit = max(limit, h.settle.bodyItems[i].rs.rule.MaxBody())
		}
	}
	return limit
}

// decideBodies decides the local rules that waited for the request body and reports whether one
// denied the request (then every reservation of the request is refunded and the local reply is
// sent).
func (h *httpContext) decideBodies(body []byte, complete bool) (denied bool) {
	p := h.plugin
	s := &p.scratch
	s.outcomes = s.outcomes[:0]
	s.resp.denier = nil
	if !h.decidePending(body, complete, abi.UnixNano()) {
		if len(s.outcomes) > 0 && p.cfg.Response.QuotaHeadersOnAllowed {
			h.quota = append(h.quota, s.outcomes...) // the response reports these limits too
		}
		return false
	}
	s.req.reset() // deny reads this request's headers
	h.deny()      // refunds the request's reservations (refundSettles)
	return true
}

// decidePending decides the local rules that waited for the request body, in order, appending
// their outcomes to the scratch list, and reports whether one denied the request.
func (h *httpContext) decidePending(body []byte, complete bool, now int64) (denied bool) {
	p, st := h.plugin, h.settle
	for _, pb := range st.pend {
		p.scratch.key = append(p.scratch.key[:0], pb.key...) // a denial's explanation names this key
		cost := p.bodyCost(pb.rs, body, complete, true)
		if denied = p.decideReserved(st, pb, cost, now); denied {
			break
		}
	}
	st.pend = st.pend[:0]
	return denied
}

// bodyCost returns the reservation a rule reads from the request body; a body that gives none
// reserves the default, and is counted (bad_body) when count is set.
func (p *pluginContext) bodyCost(rs *ruleState, body []byte, complete, count bool) int64 {
	r := rs.rule
	cost, err := r.BodyCost(body, complete)
	if err != nil && count {
		rs.settleMetrics().badBody.Increment(1)
		if p.cfg.LogLevel <= rules.LogDebug {
			proxywasm.LogDebugf("meshlimit: rule %s: request body: %v; reserving %d", r.Name, err, cost)
		}
	}
	return cost
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
	if out.Allowed && r.Settle() != nil { // a cost read from the body without a settle is final
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
	if !st.sse {
		chunk, err := proxywasm.GetHttpResponseBody(0, size)
		if err != nil {
			return types.ActionContinue
		}
		st.body = append(st.body, chunk...)
		return types.ActionContinue
	}
	// An event stream is read in pieces of at most max_body (or minSSEPiece, when max_body is
	// smaller: a tiny max_body must not make a host call per byte): one large chunk from the
	// upstream never becomes one large copy in the guest (the splitter keeps at most one event's
	// data).
	step := max(st.maxBody, minSSEPiece)
	for off := 0; off < size; off += step {
		piece, err := proxywasm.GetHttpResponseBody(off, min(step, size-off))
		if err != nil {
			return types.ActionContinue
		}
		st.events.Write(piece, st.onEvent)
	}
	if eos {
		st.events.Close(st.onEvent)
	}
	return types.ActionContinue
}

// minSSEPiece is the least piece an event stream is read in.
const minSSEPiece = 4 << 10

// onEvent reads the JSON fields of the reservations from one SSE event's data: the last event
// that carries a field settles it.
func (st *settling) onEvent(data []byte) {
	for i := range st.res {
		r := &st.res[i]
		if s := r.rs.rule.Settle(); s.Source == rules.SettleResponseJSON {
			if n, err := body.JSONInt(data, s.Path); err == nil {
				r.value, r.found = r.rs.rule.SettledValue(n), true
			}
		}
	}
}

// OnHttpResponseTrailers implements types.HttpContext. Trailers end a response whose body did not
// (HTTP/2, gRPC): the answer is whole, as if its last body chunk had said end_of_stream, so it
// settles as one (an event stream's last event without its blank line is passed on).
func (h *httpContext) OnHttpResponseTrailers(int) types.Action {
	defer h.plugin.recoverPanic("the response trailers")
	if st := h.settle; st != nil {
		st.respEnded = true
		if st.readJSON && st.sse && st.status < 500 {
			st.events.Close(st.onEvent)
		}
	}
	return types.ActionContinue
}
