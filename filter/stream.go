package filter

import "github.com/meshlimit/meshlimit/rules"

// stream is what the plugin keeps for one stream between its callbacks: one part per feature that
// keeps something across them. reset clears it for the next stream, keeping the arrays that let a
// warm request allocate nothing.
type stream struct {
	id    uint32
	calls int // callouts bound to the stream's context not answered yet (see recycle)
	// responded is set when the upstream's response headers came: the request was served, so a
	// later denial (a body-stage rule) resets the stream and gives nothing back (served).
	responded bool
	// planned is set when the plugin's local plan decided the request (localHeaders): the stream
	// then sets nothing but its id, responded and its quota outcomes (see resetPlanned).
	planned bool

	quota     quotaStream  // replier: what to report on the upstream's response
	call      callStream   // global client: the call the stream waits for
	settle    *settling    // settler: the reservations to settle when the stream ends, or nil
	settleMem *settling    // the settling newSettling reuses
	permits   []heldPermit // permits: the concurrency permits the stream holds, released when it ends
	shed      shedSlot     // shedder: the slot the stream holds
	charges   chargeStream // charger: the counted rules' charges, decided by the response
	msgs      msgStream    // message limiter: the stream's message limit and framers
	taken     takenScratch // the local takes of a request waiting for the service, given back if it denies
}

// reset clears s for another stream: only the parts a stream sets are written, each only when the
// stream used it (a plain stream clears a few words, not the whole context); the arrays that let
// a warm request allocate nothing are kept, and nothing an old configuration's rules left stays
// reachable.
func (s *stream) reset() {
	s.id, s.calls, s.settle, s.permits, s.responded, s.planned = 0, 0, nil, nil, false, false
	if s.quota.outcomes != nil || cap(s.quota.spare) > 0 {
		s.quota.reset()
	}
	if cap(s.charges.list) > 0 || s.charges.waiting {
		s.charges.reset()
	}
	if s.msgs.rule != nil || s.msgs.proto != protoNone {
		s.msgs.reset()
	}
	if cap(s.taken.list) > 0 || cap(s.taken.global) > 0 {
		clear(s.taken.list[:cap(s.taken.list)]) // no take keeps an old configuration's rules alive
		clear(s.taken.global[:cap(s.taken.global)])
		s.taken.reset(0)
	}
	if s.call.items != nil || s.call.outcomes != nil || s.call.deadline != 0 || s.call.delay != 0 {
		s.call = callStream{}
	}
	if s.shed != (shedSlot{}) {
		s.shed = shedSlot{}
	}
}

// newSettling gives the stream a fresh settling: the one it kept from an earlier stream (arrays
// kept, everything else cleared), so that a warm request with reservations allocates none.
// resetPlanned is reset for a stream the local plan decided under a plugin that still plans
// locally: no other part of the stream was set, so only these are cleared.
func (s *stream) resetPlanned() {
	s.id, s.responded, s.planned = 0, false, false
	if s.quota.outcomes != nil {
		s.quota.forget()
	}
}

func (s *stream) newSettling() *settling {
	st := s.settleMem
	if st == nil {
		st = &settling{}
		s.settleMem = st
	} else {
		st.reset()
	}
	s.settle = st
	return st
}

// quotaStream is what an admitted request reports on the upstream's response: the outcomes of its
// limits, in an inline array, or in a spare one (allocated once per context, by the first request
// with more limits than inline holds, and kept across recycling), so that a warm request
// allocates nothing whatever its limits.
type quotaStream struct {
	outcomes []rules.Outcome // nil when nothing
	inline   [2]rules.Outcome
	spare    []rules.Outcome
}

// set keeps outcomes for the response's quota fields.
func (q *quotaStream) set(outcomes []rules.Outcome) {
	if len(outcomes) <= len(q.inline) {
		q.outcomes = append(q.inline[:0], outcomes...)
		return
	}
	q.outcomes = append(q.spare[:0], outcomes...)
	q.spare = q.outcomes[:0]
}

// forget drops the outcomes that set kept, in inline or in spare: the old rules they point to are
// not kept reachable, and the rest of each outcome is overwritten by the next set.
func (q *quotaStream) forget() {
	for i := range q.outcomes {
		q.outcomes[i].Limit = nil
	}
	q.outcomes = nil
}

// adopt keeps the decision's outcomes without copying them: the stream takes the decision's array
// and gives it its spare one (emptied) for the next request. Each array belongs to the decision or
// to one context, never to two, so that a warm request allocates nothing once every context in
// use has one.
func (q *quotaStream) adopt(outcomes *[]rules.Outcome) {
	q.outcomes, *outcomes = *outcomes, q.spare[:0]
	q.spare = q.outcomes[:0]
}

func (q *quotaStream) reset() {
	spare := q.spare
	clear(spare[:cap(spare)]) // no outcome keeps the old configuration's rules alive
	*q = quotaStream{spare: spare[:0]}
}

// endHooks returns what the plugin does when a stream ends: each feature's end of a stream, in this
// order, each doing nothing for a stream that holds nothing of its kind, and listed only when the
// configuration uses the feature (a plain plugin's streams end with none). The order matters where
// one end reads what another clears: the global permits go first, because what the stream's
// unanswered check may have acquired is read from that check (its items and deadline); the
// global client then forgets the check, which frees the stream's call for the charger; the charger
// charges an unanswered response (in a call not awaited: the stream is gone); the settler settles
// the reservations; last, the permits and the shedding slot are given back, which nothing after
// them reads.
func (p *pluginContext) endHooks() []func(*httpContext) {
	var ends []func(*httpContext)
	if g := p.global; g != nil {
		ends = append(ends, g.permits.endStream, g.endStream)
	}
	counts, settles := false, false
	for i := range p.rules {
		r := p.rules[i].rule
		counts = counts || r.CountOn != nil
		settles = settles || r.Settle() != nil || r.ReservesFromBody()
	}
	if counts {
		ends = append(ends, p.charges.endStream)
	}
	if settles {
		ends = append(ends, p.settle.endStream)
	}
	if p.permits.any() {
		ends = append(ends, p.permits.endStream)
	}
	if len(p.sheds.list) > 0 {
		ends = append(ends, p.sheds.endStream)
	}
	if p.msgs.any {
		ends = append(ends, p.msgs.endStream)
	}
	return ends
}

// maxFreeContexts bounds the contexts a plugin keeps for reuse: more streams than that in flight at
// once allocate the excess.
const maxFreeContexts = 64

// newHTTPContext returns the context of stream id: one a finished stream left (see recycle), or a new
// one.
func (p *pluginContext) newHTTPContext(id uint32) *httpContext {
	if n := len(p.free); n > 0 {
		h := p.free[n-1]
		p.free[n-1] = nil
		p.free = p.free[:n-1]
		h.plugin, h.id = p, id
		return h
	}
	return &httpContext{plugin: p, stream: stream{id: id}}
}

// recycle clears the context of a stream that has ended and keeps it for the next stream, so that a
// request allocates nothing. Envoy calls nothing for the stream after OnHttpStreamDone. Only callouts
// outlive a stream's callbacks holding its context (a check's or a charge's answer is bound to it,
// global.go, charge.go): a context with such a call unanswered is never recycled (if Envoy cancels
// the call with the stream, the context is left to the collector), so a late answer never reaches
// the next stream that would have reused it.
func (h *httpContext) recycle() {
	p := h.plugin
	if h.calls > 0 || len(p.free) >= maxFreeContexts {
		return
	}
	if h.planned && p.local {
		h.stream.resetPlanned()
	} else {
		h.stream.reset()
	}
	p.free = append(p.free, h)
}
