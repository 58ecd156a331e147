package filter

import (
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/meshlimit/meshlimit/rules"
	"github.com/meshlimit/meshlimit/rules/body"
	"github.com/meshlimit/meshlimit/sharedstate"
)

// requestBody is the settler's part of OnHttpRequestBody. Only a stream with reservations looks at
// the request body: it counts the bytes, and while a rule waits to reserve from the body it holds
// the body (StopIterationAndBuffer: Envoy then calls again with size the whole buffered body) until
// it ends or passes max_body. When global items that read the body wait for it too, their call to
// the service is made then, and the body stays held until the answer resumes the request
// (settle_global.go).
func (s *settler) requestBody(h *httpContext, size int, eos bool) types.Action {
	st := h.settle
	if st == nil {
		return types.ActionContinue
	}
	if st.sent {
		return s.bodyWhileSent(h, size)
	}
	if st.buffering {
		st.reqBytes = int64(size) // the buffered body, this chunk included
	} else {
		st.reqBytes += int64(size)
	}
	if len(st.pend) == 0 && !st.global {
		return types.ActionContinue
	}
	limit := st.bodyLimit()
	if !eos && size <= limit {
		st.buffering = true
		return types.ActionPause
	}
	var body []byte
	if size <= limit {
		body, _ = s.host.body(requestPart, 0, size)
	}
	return s.bodyRead(h, body, eos && size <= limit)
}

// requestTrailers is the settler's part of OnHttpRequestTrailers. Trailers end a request whose body
// did not (gRPC, or a body sent without end_of_stream): the rules still waiting for the body decide
// now, from the body held so far (Envoy still offers it to the filter that buffered it), instead of
// letting it through undecided. A client that ends its body with trailers reserves what the body
// says, as one that ends it with end_of_stream does.
func (s *settler) requestTrailers(h *httpContext) types.Action {
	st := h.settle
	switch {
	case st == nil:
		return types.ActionContinue
	case st.sent:
		return s.bodyWhileSent(h, 0)
	case len(st.pend) == 0 && !st.global:
		return types.ActionContinue
	}
	body, complete := s.heldBody(st)
	return s.bodyRead(h, body, complete)
}

// heldBody returns the request body the filter holds when trailers end it, and whether it is whole
// (within the bound of the rules that read it, and readable).
func (s *settler) heldBody(st *settling) ([]byte, bool) {
	if !st.buffering || st.reqBytes == 0 {
		return nil, st.reqBytes == 0 // no body at all: an empty one
	}
	if st.reqBytes > int64(st.bodyLimit()) {
		return nil, false
	}
	body, err := s.host.body(requestPart, 0, int(st.reqBytes))
	return body, err == nil && len(body) == int(st.reqBytes)
}

// bodyRead decides the rules that waited for the body, read up to max_body (complete when it ended
// within), and returns the action of the body (or trailers) callback.
func (s *settler) bodyRead(h *httpContext, body []byte, complete bool) types.Action {
	st := h.settle
	if st.global {
		return s.callWithBody(h, body, complete) // settle_global.go
	}
	st.buffering = false
	if s.decideBodies(h, body, complete) {
		return types.ActionPause // denied: the local reply is on its way
	}
	return types.ActionContinue
}

// bodyLimit is the most body bytes a rule that waits for the body reads.
func (st *settling) bodyLimit() int {
	limit := 0
	for _, pb := range st.pend {
		limit = max(limit, pb.rs.rule.MaxBody())
	}
	if st.global {
		for i := range st.bodyItems {
			limit = max(limit, st.bodyItems[i].rs.rule.MaxBody())
		}
	}
	return limit
}

// decideBodies decides the local rules that waited for the request body and reports whether one
// denied the request (then every reservation of the request is refunded and the local reply is
// sent).
func (s *settler) decideBodies(h *httpContext, body []byte, complete bool) (denied bool) {
	d := &s.d
	d.outcomes = d.outcomes[:0]
	d.denier = nil
	if !s.decidePending(h, body, complete, s.host.now()) {
		if len(d.outcomes) > 0 && s.cfg.Response.QuotaHeadersOnAllowed {
			h.quota.outcomes = append(h.quota.outcomes, d.outcomes...) // the response reports these limits too
		}
		return false
	}
	d.req.reset() // deny reads this request's headers
	h.deny()      // refunds the request's reservations (refund)
	return true
}

// decidePending decides the local rules that waited for the request body, in order, appending
// their outcomes to the decision's, and reports whether one denied the request.
func (s *settler) decidePending(h *httpContext, body []byte, complete bool, now int64) (denied bool) {
	d, st := &s.d, h.settle
	for _, pb := range st.pend {
		d.key = append(d.key[:0], pb.key...) // a denial's explanation names this key
		cost := s.bodyCost(pb.rs, body, complete, true)
		if denied = s.decideReserved(st, pb, cost, now); denied {
			break
		}
	}
	st.pend = st.pend[:0]
	return denied
}

// bodyCost returns the reservation a rule reads from the request body; a body that gives none
// reserves the default, and is counted (bad_body) when count is set.
func (s *settler) bodyCost(rs *ruleState, body []byte, complete, count bool) int64 {
	r := rs.rule
	cost, err := r.BodyCost(body, complete)
	if err != nil && count {
		rs.settleMetrics(s.host).badBody.inc(1)
		if s.debugging() {
			logf(s.host, logDebug, "meshlimit: rule %s: request body: %v; reserving %d", r.Name, err, cost)
		}
	}
	return cost
}

// decideReserved takes a body reservation as decide takes a request's cost, and reports whether it
// denies the request (enforced).
func (s *settler) decideReserved(st *settling, pb pendingBody, cost, now int64) bool {
	rs, r, d := pb.rs, pb.rs.rule, &s.d
	enforced := s.cfg.Enforce && !r.Shadow && r.EnforcedForString(pb.key)
	out, err := s.limiter.Take(rs.tables[pb.set], []byte(pb.key), now, cost)
	if err != nil {
		if err != sharedstate.ErrContention {
			logf(s.host, logWarn, "meshlimit: rule %s: %v", r.Name, err)
		}
		return r.FailureMode == rules.FailDeny && enforced
	}
	d.count(rs, out.Allowed, enforced)
	if out.Allowed && r.Settle() != nil { // a cost read from the body without a settle is final
		st.res = append(st.res, reservation{rs: rs, set: pb.set, key: pb.key, placement: out.Placement, at: now, reserved: cost})
	}
	if enforced {
		specs := rs.placed(out.Placement, r.LimitSets()[pb.set].Limits)
		pk := s.cfg.Response.PartitionString(r, pb.key)
		for j := range specs {
			d.outcome(&specs[j], out.Decisions[j], pk)
		}
	}
	return enforced && !out.Allowed
}

// responseBody is the settler's part of OnHttpResponseBody. Only a stream with reservations looks
// at the response body: it counts the bytes and copies what a JSON field needs (at most max_body
// bytes, or one SSE event at a time), while the body passes on.
func (s *settler) responseBody(h *httpContext, size int, eos bool) {
	st := h.settle
	if st == nil {
		return
	}
	st.respBytes += int64(size)
	st.respEnded = eos
	if !st.readJSON || st.status >= 500 || size == 0 {
		return
	}
	if !st.sse && (st.cut || len(st.body)+size > st.maxBody) {
		st.cut, st.body = true, nil
		return
	}
	if !st.sse {
		chunk, err := s.host.body(responsePart, 0, size)
		if err != nil {
			return
		}
		st.body = append(st.body, chunk...)
		return
	}
	// An event stream is read in pieces of at most max_body (or minSSEPiece, when max_body is
	// smaller: a tiny max_body must not make a host call per byte): one large chunk from the
	// upstream never becomes one large copy in the guest (the splitter keeps at most one event's
	// data).
	step := max(st.maxBody, minSSEPiece)
	for off := 0; off < size; off += step {
		piece, err := s.host.body(responsePart, off, min(step, size-off))
		if err != nil {
			return
		}
		st.events.Write(piece, st.onEvent)
	}
	if eos {
		st.events.Close(st.onEvent)
	}
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

// responseTrailers is the settler's part of OnHttpResponseTrailers. Trailers end a response whose
// body did not (HTTP/2, gRPC): the answer is whole, as if its last body chunk had said
// end_of_stream, so it settles as one (an event stream's last event without its blank line is
// passed on).
func (s *settler) responseTrailers(h *httpContext) {
	if st := h.settle; st != nil {
		st.respEnded = true
		if st.readJSON && st.sse && st.status < 500 {
			st.events.Close(st.onEvent)
		}
	}
}
