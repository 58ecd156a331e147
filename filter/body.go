package filter

import (
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/meshlimit/meshlimit/rules"
	"github.com/meshlimit/meshlimit/sharedstate"
)

// The body stage: a rule that reserves from the request body (request_json) decides when the body
// has arrived (settle.go says how it then settles). bodyStage holds the body for those rules and
// decides them; their reservations join the stream's settling.

// bodyStage decides the rules that wait for the request body, local and global (their call to the
// service is made with the body).
type bodyStage struct {
	*env
	settle *settler
	g      *globalClient // nil without a global service
	shaper *shaper
}

// deferToBody records a rule that reserves from the request body, instead of deciding it now, and
// reports whether it did: its local part as pending, its global part as a global item whose cost
// the body will say (deferGlobal).
func (s *bodyStage) deferToBody(rs *ruleState, set *rules.LimitSet, key []byte) bool {
	r, d := rs.rule, &s.d
	if !r.ReservesFromBody() || d.settle.eos {
		return false
	}
	if r.Scope != rules.ScopeLocal {
		d.globals = append(d.globals, globalItem{rs: rs, spec: set.Limits, key: string(key), fromBody: true})
	}
	if r.Scope != rules.ScopeGlobal {
		d.settle.pend = append(d.settle.pend, pendingBody{rs: rs, set: set.Index, key: string(key)})
	}
	return true
}

// requestBody is the body stage's part of OnHttpRequestBody. Only a stream with reservations looks at
// the request body: it counts the bytes, and while a rule waits to reserve from the body it holds
// the body (StopIterationAndBuffer: Envoy then calls again with size the whole buffered body) until
// it ends or passes max_body. When global items that read the body wait for it too, their call to
// the service is made then, and the body stays held until the answer resumes the request
// (callWithBody).
func (s *bodyStage) requestBody(h *httpContext, size int, eos bool) types.Action {
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

// requestTrailers is the body stage's part of OnHttpRequestTrailers. Trailers end a request whose body
// did not (gRPC, or a body sent without end_of_stream): the rules still waiting for the body decide
// now, from the body held so far (Envoy still offers it to the filter that buffered it), instead of
// letting it through undecided. A client that ends its body with trailers reserves what the body
// says, as one that ends it with end_of_stream does.
func (s *bodyStage) requestTrailers(h *httpContext) types.Action {
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
func (s *bodyStage) heldBody(st *settling) ([]byte, bool) {
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
func (s *bodyStage) bodyRead(h *httpContext, body []byte, complete bool) types.Action {
	st := h.settle
	if st.global {
		return s.callWithBody(h, body, complete)
	}
	st.buffering = false
	if s.decideBodies(h, body, complete) {
		return types.ActionPause // denied: the local reply is on its way (the headers' takes given back)
	}
	h.taken.reset(0) // admitted: the takes of its headers' rules are spent
	return types.ActionContinue
}

// waitsForBody reports whether rules of the stream still wait for the request body to decide (a
// local rule reading its cost from it, or global items to be sent with it): a denial there gives
// back what the headers' rules took (giveBack), so the stream keeps their takes until then. A nil
// st waits for nothing.
func (st *settling) waitsForBody() bool {
	return st != nil && (len(st.pend) > 0 || st.global)
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
func (s *bodyStage) decideBodies(h *httpContext, body []byte, complete bool) (denied bool) {
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
func (s *bodyStage) decidePending(h *httpContext, body []byte, complete bool, now int64) (denied bool) {
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
func (s *bodyStage) bodyCost(rs *ruleState, body []byte, complete, count bool) int64 {
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
func (s *bodyStage) decideReserved(st *settling, pb pendingBody, cost, now int64) bool {
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
		if out.Placement == sharedstate.Overflow { // one shared count, one pk
			pk = s.cfg.Response.PartitionIn(r, nil, true)
		}
		for j := range specs {
			d.outcome(&specs[j], out.Decisions[j], pk, now)
		}
	}
	return enforced && !out.Allowed
}

// A global rule that reserves from the request body (request_json) cannot be decided with the
// request headers; every other global rule of the request must be, as if no rule read the body: a
// rule that reads no body never waits for one (a client whose body never ends would otherwise hold
// its request open upstream, the headers gone on, without counting against a per-request limit).
// So a request with both kinds makes two calls: the items that read no body go in the call made
// with the headers (paused; a denial answers at once, an admission resumes them), and the items that
// read the body wait for it and go in the call made then. The local rules are decided with the
// headers as always, a local rule reading the body with the body. At the body stage the body is held
// (StopIterationAndBuffer, at most the largest max_body of the rules reading it, plus what arrives
// while the call is out) until it ends or passes that bound, the reservations are read from it (a
// bad body reserves the default and counts bad_body, as locally), and the call is made with the
// request paused at the body stage; the answer resumes it (the held body goes on) or denies it (the
// local reply; the upstream, which has seen the headers, is reset, and what the headers' call
// reserved is refunded). A request whose headers end it reserves the default at once; one whose
// body never ends is charged the default of each rule reading the body when the stream ends (a
// settle, which may put the key into debt), as locally.

// deferGlobal keeps, for the body stage, the current request's global items that read their cost
// from the request body, taking them out of the decision's global items, and reports whether no item is left
// to decide with the headers (then the headers continue at once).
func (s *bodyStage) deferGlobal(h *httpContext) bool {
	d := &s.d
	wants := false
	for i := range d.globals {
		wants = wants || d.globals[i].fromBody
	}
	if !wants {
		return false
	}
	if h.settle == nil {
		h.newSettling()
	}
	st := h.settle
	st.global = true
	kept := d.globals[:0]
	for _, it := range d.globals {
		if !it.fromBody {
			kept = append(kept, it)
			continue
		}
		st.bodyItems = append(st.bodyItems, it)
		s.settle.askReadable(st, it.rs)
	}
	d.globals = kept
	h.call.outcomes = append(h.call.outcomes[:0], d.outcomes...)
	h.call.delay = d.delay
	return len(kept) == 0
}

// keepForBody, when the headers' global decision admits a request whose body-reading items wait
// for the body, carries what the headers decided into the body stage: the outcomes (for the quota
// headers and a denial's fields); the shaping delay is spent with the headers.
func (s *bodyStage) keepForBody(h *httpContext) {
	h.call.outcomes = append(h.call.outcomes[:0], s.d.outcomes...)
	h.call.delay = 0
}

// callWithBody decides a request whose body-reading global items waited for its body, read up to
// max_body (complete when it ended within): the local rules that waited for the body first, then
// those global items in one call (globalClient.check), which pauses the request at the body stage.
func (s *bodyStage) callWithBody(h *httpContext, body []byte, complete bool) types.Action {
	d, st := &s.d, h.settle
	st.global, st.buffering = false, false
	now := s.host.now()
	d.restore(&h.call)
	d.denier = nil
	d.globals = append(d.globals[:0], st.bodyItems...)
	for i := range d.globals {
		it := &d.globals[i]
		it.cost = s.bodyCost(it.rs, body, complete, it.rs.rule.Scope == rules.ScopeGlobal) // both: counted once, locally
	}
	if s.decidePending(h, body, complete, now) {
		h.deny()
		return types.ActionPause
	}
	act := s.g.check(h, now)
	if act == types.ActionPause && h.settle != nil {
		st.sent, st.buffering = true, true // waiting, or held by a shaping delay; a denial ended the stream
	}
	return act
}

// bodyWhileSent answers a body chunk that arrives after the body stage paused the request: held
// while the answer (or a shaping delay) is awaited, Envoy buffering it with what it holds; once the
// request was resumed, the held body went on and the chunk does too.
func (s *bodyStage) bodyWhileSent(h *httpContext, size int) types.Action {
	st := h.settle
	if h.call.deadline != 0 || s.shaper.holds(h.id) {
		st.reqBytes = max(st.reqBytes, int64(size)) // the whole buffer (trailers come with size 0)
		return types.ActionPause
	}
	st.sent, st.buffering = false, false
	st.reqBytes += int64(size)
	return types.ActionContinue
}
