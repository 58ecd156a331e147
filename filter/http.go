package filter

import (
	"errors"
	"math/rand/v2"
	"unsafe"

	"github.com/meshlimit/meshlimit/rules"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/meshlimit/meshlimit/abi"
	"github.com/meshlimit/meshlimit/sharedstate"
)

// scratch holds the buffers one plugin reuses from request to request. A VM runs one callback at a
// time and the local path never pauses, so one set per plugin context is enough.
type scratch struct {
	delay    int64 // the longest shaping delay (ns) an enforced leaky-bucket limit asked for
	req      hostRequest
	globals  []globalItem // the global rules that apply to the current request
	key      []byte
	outcomes []rules.Outcome
	respHdr  []byte // a response header value just read (responseHeader)
	fields   []rules.Field
	buf      []byte
	local    rules.LocalResponse
	acquired []heldPermit // the permits taken for the current request (concurrency.go)
	pairs    [][2]string
	sent     []byte         // the local response's headers as the host reads them (abi.SendLocalResponse)
	deciding int            // the index of the rule being decided, or -1: whose failure_mode a panic applies
	settle   settleScratch  // the reservations of the current request (settle.go)
	resp     respondState   // counted rules' charges and the denying rule (respond.go)
	free     []*httpContext // contexts of finished streams, for the next streams (see recycle)
}

// httpContext implements types.HttpContext for one request.
type httpContext struct {
	types.DefaultHttpContext
	plugin *pluginContext
	id     uint32
	quota  []rules.Outcome // what to report on the upstream's response; nil when nothing
	inline [2]rules.Outcome
	spare  []rules.Outcome // a larger array for quota, kept when the context is recycled

	globals       []globalItem    // while waiting for the global service: what it was asked
	localOutcomes []rules.Outcome // and the outcomes of the local rules already decided
	delay         int64           // and the shaping delay they asked for
	deadline      int64           // and when to stop waiting (unix ns); 0 when not waiting
	settle        *settling       // the reservations to settle when the stream ends (settle.go)
	settleMem     *settling       // the settling newSettling reuses, kept when the context is recycled

	permits   []heldPermit // the concurrency permits the stream holds, released when it ends
	shedClass int          // the shedder's class of the slot the stream holds, if shedHeld
	shedIdx   int          // the index in plugin.sheds of that shedder
	shedHeld  bool
	admitted  int64 // when the shedder admitted the stream (unix ns)
	responded int64 // when the upstream's response headers arrived (unix ns), or 0

	calls      int      // callouts bound to this context not answered yet (see recycle)
	charges    []charge // the counted rules' charges, decided by the response (respond.go)
	chargeKeys []byte   // the bytes of their keys
	charging   bool     // the response waits for the service's answer to a charge
}

// OnHttpRequestHeaders implements types.HttpContext. It runs the matching rules in order, each against
// its shared-data table, and answers with the configured local response at the first enforced denial
// (later rules are then not charged). Rules in shadow mode, and every rule when enforce is false, count
// and tag but never deny. A panic is recovered: the failure_mode of the rule being decided applies.
func (h *httpContext) OnHttpRequestHeaders(_ int, eos bool) (act types.Action) {
	defer func() {
		if r := recover(); r != nil {
			act = h.panicked("the request headers", r)
		}
	}()
	h.plugin.scratch.settle.eos = eos // settle.go: no body will come
	return h.requestHeaders()
}

func (h *httpContext) requestHeaders() types.Action {
	p := h.plugin
	s := &p.scratch
	s.req.reset()
	s.outcomes = s.outcomes[:0]
	s.globals = s.globals[:0]
	s.delay = 0
	s.deciding = -1
	s.resp.charges, s.resp.keys, s.resp.denier = s.resp.charges[:0], s.resp.keys[:0], nil
	s.settle.res, s.settle.pend, s.settle.keys = s.settle.res[:0], s.settle.pend[:0], s.settle.keys[:0]
	s.acquired = s.acquired[:0]
	defer h.adoptPermits() // also after a panic: a permit taken is always released
	now := abi.UnixNano()
	denied := false
	for i := range p.rules {
		s.deciding = i
		if denied = p.decide(&p.rules[i], now); denied {
			break
		}
	}
	s.deciding = -1
	h.adoptSettles(denied, now)
	if denied {
		s.acquired = p.releasePermits(s.acquired, now)
		h.deny()
		return types.ActionPause
	}
	h.keepCharges()
	if len(p.sheds) > 0 && h.admitShed(now) {
		return types.ActionPause
	}
	if len(s.globals) > 0 {
		if h.deferGlobal() { // settle_global.go: the call waits for the request body
			return types.ActionContinue
		}
		return h.checkGlobal(now)
	}
	if len(s.outcomes) > 0 && p.cfg.Response.QuotaHeadersOnAllowed {
		h.setQuota(s.outcomes)
	}
	if s.delay > 0 {
		p.shaper.hold(h.id, now+s.delay)
		return types.ActionPause
	}
	return types.ActionContinue
}

// decide applies one rule to the current request and reports whether it denies it (enforced). The
// outcomes of enforced rules are appended to the scratch list for the response headers.
func (p *pluginContext) decide(rs *ruleState, now int64) (denied bool) {
	s, r := &p.scratch, rs.rule
	if !r.Matches(&s.req) {
		return false
	}
	testPanic(panicRequestHeaders)
	key, st := r.AppendKey(s.key[:0], &s.req)
	s.key = key
	switch st {
	case rules.KeySkip:
		return false
	case rules.KeyConflict: // a key header or parameter repeated with different values is refused
		return p.count(rs, false, p.cfg.Enforce && !r.Shadow)
	}
	set, unlimited := r.Limits(key)
	if unlimited {
		return false
	}
	if r.ReservesFromBody() && p.deferToBody(rs, set, key) { // settle.go: a reservation read from the body
		return false
	}
	cost, err := r.Cost(&s.req)
	if err != nil && p.cfg.LogLevel <= rules.LogDebug {
		proxywasm.LogDebugf("meshlimit: rule %s: %v; charging %d", r.Name, err, cost)
	}
	if r.CountOn != nil {
		return p.checkCounted(rs, set, key, cost, now)
	}
	if r.Scope != rules.ScopeLocal && p.queueGlobal(rs, set, key, cost, now) {
		return false
	}
	enforced := p.cfg.Enforce && !r.Shadow && (r.EnforcePercent == 100 || r.EnforcedFor(key))
	if rs.permits != nil {
		return p.acquirePermit(rs, key, now, enforced)
	}
	return p.decideLocal(rs, set, key, cost, now, enforced)
}

// queueGlobal queues a global (or both) rule's decision for the service, unless leased units admit
// the request at once. It reports whether nothing is left to decide locally.
func (p *pluginContext) queueGlobal(rs *ruleState, set *rules.LimitSet, key []byte, cost, now int64) (done bool) {
	r := rs.rule
	it := globalItem{rs: rs, spec: set.Limits, key: string(key), cost: cost}
	if r.Lease() != nil && p.spendLease(&it, now) {
		rs.metrics.leaseSpent.Increment(1)
		rs.metrics.allowed.Increment(1)
		return true
	}
	p.scratch.globals = append(p.scratch.globals, it)
	if r.Lease() != nil {
		p.wantLease(&it, now)
	}
	return r.Scope == rules.ScopeGlobal
}

// decideLocal decides a rule's key against its shared-data table, records the outcome and reports
// whether the request is denied.
func (p *pluginContext) decideLocal(rs *ruleState, set *rules.LimitSet, key []byte, cost, now int64, enforced bool) (denied bool) {
	s, r := &p.scratch, rs.rule
	out, err := p.limiter.Take(rs.tables[set.Index], key, now, cost)
	if (out.Attempts > 1 || err != nil) && p.updated(rs, out.Attempts, err) != nil {
		return p.failed(rs, enforced)
	}
	specs := rs.placed(out.Placement, set.Limits)
	if p.cfg.LogLevel <= rules.LogDebug {
		proxywasm.LogDebugf("meshlimit: rule %s key %q cost %d: allowed=%t (%d attempts)", r.Name, key, cost, out.Allowed, out.Attempts)
	}
	p.count(rs, out.Allowed, enforced)
	p.nearLimit(rs, out.Decisions, specs)
	p.reserve(rs, set.Index, key, &out, cost, now)
	if enforced {
		pk := p.cfg.Response.Partition(r, key)
		for j := range specs {
			s.outcomes = append(s.outcomes, rules.Outcome{Limit: &specs[j], Decision: out.Decisions[j], Partition: pk})
			if d := int64(out.Decisions[j].Delay); out.Allowed && d > s.delay {
				s.delay = d
			}
		}
	}
	return enforced && !out.Allowed
}

// updated counts the CAS rounds a shared-state update of the rule took and logs a failure that is
// not contention (which is counted); it returns err.
func (p *pluginContext) updated(rs *ruleState, attempts int, err error) error {
	if attempts > 1 {
		rs.metrics.casRetries.Increment(uint64(attempts - 1))
	}
	if err != nil {
		if errors.Is(err, sharedstate.ErrContention) {
			rs.metrics.casExhausted.Increment(1)
		} else {
			proxywasm.LogWarnf("meshlimit: rule %s: %v", rs.rule.Name, err)
		}
	}
	return err
}

// failed decides a request whose rule could not update its shared state: denied (and counted) when
// the rule fails closed and is enforced, else let through.
func (p *pluginContext) failed(rs *ruleState, enforced bool) (denied bool) {
	if rs.rule.FailureMode == rules.FailDeny && enforced {
		rs.metrics.failureDenied.Increment(1)
		return true
	}
	return false
}

// deny sends the configured local response. The host sends it after this callback returns.
func (h *httpContext) deny() {
	h.refundSettles() // settle.go: a denied request used nothing
	p := h.plugin
	s := &p.scratch
	ct, _ := s.req.Header("content-type")
	s.buf = p.cfg.Response.Deny(&s.local, s.buf[:0], s.outcomes, rules.IsGRPC(ct), rand.Uint64())
	s.pairs = h.explain(fieldViews(s.pairs[:0], s.local.Headers))
	h.charges = h.charges[:0] // the local reply is not a response to charge
	var st abi.Status
	if s.sent, st = abi.SendLocalResponse(s.local.Status, s.pairs, s.local.Body, s.local.GRPCStatus, s.sent); st != abi.StatusOK {
		proxywasm.LogErrorf("meshlimit: sending the local response: %v", st)
	}
}

// fieldViews appends fields to dst as name-value pairs whose values view the fields' bytes: valid
// until the rendering buffer is reused, which is long enough for the host to copy them.
func fieldViews(dst [][2]string, fields []rules.Field) [][2]string {
	for _, f := range fields {
		dst = append(dst, [2]string{f.Name, unsafe.String(unsafe.SliceData(f.Value), len(f.Value))})
	}
	return dst
}

// OnHttpResponseHeaders implements types.HttpContext: an admitted request's quota fields are added to
// the upstream's response. A panic is recovered: the response goes on without them.
func (h *httpContext) OnHttpResponseHeaders(_ int, eos bool) types.Action {
	defer h.plugin.recoverPanic("the response headers")
	testPanic(panicResponseHeaders)
	paused := len(h.charges) > 0 && h.chargeCounted()
	if h.settle != nil {
		h.settleHeaders(eos)
	}
	if h.shedHeld && h.responded == 0 && h.plugin.sheds[h.shedIdx].cfg.Adaptive != nil {
		h.responded = abi.UnixNano()
	}
	if h.quota == nil {
		return respondAction(paused)
	}
	s := &h.plugin.scratch
	s.fields, s.buf = h.plugin.cfg.Response.AppendAllowed(s.fields[:0], s.buf[:0], h.quota, rand.Uint64())
	for _, f := range s.fields {
		_ = abi.AddHeader(abi.ResponseHeaders, f.Name, f.Value) // the host copies the value
	}
	return respondAction(paused)
}

// maxFreeContexts bounds the contexts a plugin keeps for reuse: more streams than that in flight at
// once allocate the excess.
const maxFreeContexts = 64

// newHTTPContext returns the context of stream id: one a finished stream left (see recycle), or a new
// one.
func (p *pluginContext) newHTTPContext(id uint32) *httpContext {
	s := &p.scratch
	if n := len(s.free); n > 0 {
		h := s.free[n-1]
		s.free[n-1] = nil
		s.free = s.free[:n-1]
		h.plugin, h.id = p, id
		return h
	}
	return &httpContext{plugin: p, id: id}
}

// recycle clears the context of a stream that has ended and keeps it for the next stream, so that a
// request allocates nothing. Envoy calls nothing for the stream after OnHttpStreamDone. Only callouts
// outlive a stream's callbacks holding its context (a check's or a charge's answer is bound to it,
// global.go, respond.go): a context with such a call unanswered is never recycled (if Envoy cancels
// the call with the stream, the context is left to the collector), so a late answer never reaches
// the next stream that would have reused it.
func (h *httpContext) recycle() {
	p := h.plugin
	if h.calls > 0 || len(p.scratch.free) >= maxFreeContexts {
		return
	}
	spare, charges, keys, st := h.spare, h.charges, h.chargeKeys, h.settleMem
	clear(spare[:cap(spare)]) // no outcome or charge keeps the old configuration's rules alive
	clear(charges[:cap(charges)])
	*h = httpContext{spare: spare[:0], charges: charges[:0], chargeKeys: keys[:0], settleMem: st}
	p.scratch.free = append(p.scratch.free, h)
}

// setQuota keeps outcomes for the response's quota headers: in the context's inline array, or in
// its spare one (allocated once per context, by the first request with more limits than inline
// holds, and kept across recycling), so that a warm request allocates nothing whatever its limits.
func (h *httpContext) setQuota(outcomes []rules.Outcome) {
	if len(outcomes) <= len(h.inline) {
		h.quota = append(h.inline[:0], outcomes...)
		return
	}
	h.quota = append(h.spare[:0], outcomes...)
	h.spare = h.quota[:0]
}

// OnHttpStreamDone implements types.HttpContext: a request that was still waiting for the service (the
// client left) is forgotten, and the context is recycled once everything else is done with it.
func (h *httpContext) OnHttpStreamDone() {
	defer h.recycle() // runs last
	defer h.plugin.recoverPanic("the end of a stream")
	// Each step below does nothing for a stream that holds nothing of its kind; the checks keep the
	// steps' code out of a plain request's path.
	if h.plugin.global != nil {
		h.endGlobalPermits() // global_concurrency.go: before unwait, which forgets the call
	}
	if h.deadline != 0 {
		h.plugin.global.unwait(h) // before chargeUnanswered, whose call takes h.globals and the deadline
	}
	if len(h.charges) > 0 {
		h.chargeUnanswered()
	}
	if h.settle != nil {
		h.settleDone()
	}
	if len(h.permits) > 0 || h.shedHeld {
		h.endStream()
	}
	if h.deadline != 0 {
		h.plugin.global.unwait(h) // the unanswered charge's call: its answer never comes to a stream gone
	}
}
