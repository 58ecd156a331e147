package filter

import (
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

// httpContext implements types.HttpContext for one stream: its callbacks hand the stream to the
// features, and the request's path across them (decide every rule, then answer, wait for the
// service, hold for a shaping delay, or go on) is here. The stream's state is the features' parts in
// stream.
type httpContext struct {
	types.DefaultHttpContext
	plugin *pluginContext
	stream
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
	if h.plugin.local {
		return h.plugin.localHeaders(h)
	}
	return h.requestHeaders(eos)
}

// requestHeaders decides the request; the permits it took go to the stream and its takes are
// forgotten whatever the outcome (panicked does the same after a panic), with no defer on the path.
func (h *httpContext) requestHeaders(eos bool) types.Action {
	act := h.decideHeaders(eos)
	h.plugin.endHeaders(h)
	return act
}

// endHeaders ends the request headers' callback: a permit taken is always released with the stream
// (adopted by it), and the takes are given back only by a denial in this callback.
func (p *pluginContext) endHeaders(h *httpContext) {
	p.d.taken.reset(0)
	p.permits.adopt(h)
}

func (h *httpContext) decideHeaders(eos bool) types.Action {
	p := h.plugin
	d := &p.d
	d.reset(eos)
	now := p.host.now()
	d.taken.reset(now)
	denied := p.decideRules(now, false)
	p.settle.adopt(h, denied, now)
	if denied {
		p.permits.releaseAcquired(now)
		h.deny()
		return types.ActionPause
	}
	if len(d.charges.list) > 0 {
		p.charges.keep(h)
	}
	if p.msgs.any {
		p.msgs.keep(h)
	}
	if p.sheds.admit(h, now) {
		h.spendNothing(now) // a shed request spends nothing of the rules before it
		return types.ActionPause
	}
	if len(d.globals) > 0 || h.settle.waitsForBody() {
		d.taken.keep(h) // the service or the body stage may still deny: the takes wait in the stream
	}
	if len(d.globals) > 0 {
		if p.body.deferGlobal(h) { // the call waits for the request body
			return types.ActionContinue
		}
		return p.global.check(h, now)
	}
	return h.finish(false, false, now)
}

// finish ends the decision of a request: a denial sends the local response; a shaping delay holds
// the request until its turn; otherwise the request continues (resumed, when it was paused). It
// returns the action for a decision made in a callback of the request itself.
func (h *httpContext) finish(denied, paused bool, now int64) types.Action {
	p := h.plugin
	d := &p.d
	if denied {
		h.deny()
		return types.ActionPause
	}
	if !h.settle.waitsForBody() {
		h.taken.reset(0) // admitted: its takes are spent
	}
	if st := h.settle; st != nil && st.global {
		p.body.keepForBody(h) // the headers' decision; the body's items are still to come
	}
	if len(d.outcomes) > 0 && p.cfg.Response.QuotaHeadersOnAllowed {
		h.quota.set(d.outcomes)
	}
	if d.delay > 0 {
		p.shaper.hold(h.id, now+d.delay)
		return types.ActionPause
	}
	if paused {
		p.host.resume(requestPart)
	}
	return types.ActionContinue
}

// deny answers the current request with the configured local response (the host sends it after
// this callback returns): its reservations are refunded and, when it is denied while its headers are
// decided, its rules' takes given back (it never reached the upstream), and its charges dropped (the local reply is not a response to charge).
//
// A request the upstream has already answered (its response headers came before a body-stage rule
// denied its body) was served: its denial resets the stream and refunds and gives back nothing,
// else a client would send a body that some rule denies after each answer and never be counted.
func (h *httpContext) deny() {
	p := h.plugin
	if !h.responded {
		p.settle.refund(h)
		p.charges.drop(h) // before giveBack, which sends the service the global charges it gives back
		p.settle.giveBack(h, p.host.now())
	}
	p.replies.deny(h)
}

// served marks the request as served when its response headers come: the takes its stream kept to
// give back on a body-stage denial (local and global) are spent now. The charger has already
// given back the counted rules' charges that the answer does not count (charges.respond).
func (h *httpContext) served() {
	h.responded = true
	if len(h.taken.list) > 0 || len(h.taken.global) > 0 {
		h.taken.reset(0)
	}
}

// OnHttpRequestBody implements types.HttpContext: only a stream with reservations looks at the
// request body (bodyStage). A panic is recovered: the body goes on.
func (h *httpContext) OnHttpRequestBody(size int, eos bool) (act types.Action) {
	defer h.plugin.panics.recoverContinue("the request body", &act)
	if eos && h.shed.held {
		h.plugin.sheds.requestEnded(h)
	}
	if act, decided := h.plugin.msgs.body(h, requestPart, size); decided {
		return act
	}
	return h.plugin.body.requestBody(h, size, eos)
}

// OnHttpRequestTrailers implements types.HttpContext: trailers end a request whose body did not,
// and the rules still waiting for the body decide (bodyStage). A panic is recovered: the request
// goes on.
func (h *httpContext) OnHttpRequestTrailers(int) (act types.Action) {
	defer h.plugin.panics.recoverContinue("the request trailers", &act)
	if h.shed.held {
		h.plugin.sheds.requestEnded(h)
	}
	if h.plugin.msgs.trailers(h, requestPart) { // they follow the body a hold keeps
		return types.ActionPause
	}
	return h.plugin.body.requestTrailers(h)
}

// OnHttpResponseHeaders implements types.HttpContext: the counted rules charge the response
// (charger), the reservations read what the headers say (settler), the shedder notes the upstream's
// latency, and an admitted request's quota fields are added (replier). A panic is recovered: the
// response goes on.
func (h *httpContext) OnHttpResponseHeaders(_ int, eos bool) types.Action {
	if !testPanics && h.respondsWithNothing() {
		return types.ActionContinue // nothing to read nor add: no recover deferred
	}
	p := h.plugin
	defer p.panics.recoverPanic("the response headers")
	testPanic(p.host, panicResponseHeaders)
	if h.planned && p.local { // the local plan's stream: only its quota fields
		h.responded = true
		p.replies.addQuota(h)
		return types.ActionContinue
	}
	paused := p.charges.respond(h)
	h.served()
	p.settle.responseHeaders(h, eos)
	if h.shed.held {
		p.sheds.responded(h)
	}
	p.replies.addQuota(h)
	p.msgs.responseHeaders(h)
	if paused {
		return types.ActionPause
	}
	return types.ActionContinue
}

// respondsWithNothing reports whether the stream has nothing for its response: no charge, no
// reservation, no shedding slot, no quota fields, no message limit.
func (h *httpContext) respondsWithNothing() bool {
	return len(h.charges.list) == 0 && h.settle == nil && !h.shed.held && h.quota.outcomes == nil && h.msgs.rule == nil
}

// OnHttpResponseBody implements types.HttpContext: only a stream with reservations looks at the
// response body (settler), or one with a message limit. A panic is recovered: the body goes on.
func (h *httpContext) OnHttpResponseBody(size int, eos bool) types.Action {
	if h.msgs.rule == nil && h.settle == nil {
		return types.ActionContinue // no recover deferred for a body nothing reads
	}
	defer h.plugin.panics.recoverPanic("the response body")
	if act, decided := h.plugin.msgs.body(h, responsePart, size); decided {
		return act
	}
	if h.settle != nil {
		h.plugin.settle.responseBody(h, size, eos)
	}
	return types.ActionContinue
}

// OnHttpResponseTrailers implements types.HttpContext: trailers end a response whose body did not
// (settler). A panic is recovered.
func (h *httpContext) OnHttpResponseTrailers(int) types.Action {
	defer h.plugin.panics.recoverPanic("the response trailers")
	if h.plugin.msgs.trailers(h, responsePart) {
		return types.ActionPause
	}
	h.plugin.settle.responseTrailers(h)
	return types.ActionContinue
}

// OnHttpStreamDone implements types.HttpContext: each feature gives back or settles what the stream
// holds (endHooks says in which order), and the context is recycled once everything else is done
// with it.
func (h *httpContext) OnHttpStreamDone() {
	p := h.plugin
	if len(p.ends) > 0 {
		h.streamEnds()
	}
	if p.stats.untimed {
		p.stats.flush()
	}
	h.recycle()
}

// streamEnds runs the features' ends of the stream, recovering a panic (the context is recycled
// after it all the same).
func (h *httpContext) streamEnds() {
	defer h.plugin.panics.recoverPanic("the end of a stream")
	for _, end := range h.plugin.ends {
		end(h)
	}
}
