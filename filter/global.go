package filter

import (
	"errors"
	"time"

	"github.com/meshlimit/meshlimit/rules"
	"github.com/meshlimit/meshlimit/wire"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/meshlimit/meshlimit/abi"
)

// The global path: rules with scope "global" (or "both") are decided by the decision service
// (cmd/meshlimit-service), called through an Envoy cluster with one proxy_http_call per request that
// carries every global descriptor of the request. The request is paused until the answer arrives, then
// resumed or answered with the local response.
//
// A limiter failure must never take the site down:
//   - the call has a timeout (global.timeout, default 20ms), which the host enforces; the filter also
//     enforces it on its own timer (deadlineSlack later, checked every tick), because hosts have been
//     seen where the callout timeout never fired (Kuadrant wasm-shim #425): a request never waits on
//     the service longer than timeout + deadlineSlack + one tick, and an answer after that is ignored;
//   - a failed call (timeout, 5xx answer, unreadable body, reset) applies each rule's fallback
//     limits in this proxy's shared data, or, without a fallback, its failure_mode (allow by default);
//   - a 4xx answer is the service refusing the check, not an outage: it is counted
//     (global.rejected), logged at warn at most once per rejectLogEvery per worker, and each rule's
//     failure_mode applies (no fallback, no breaker: the service is up, the check is what is wrong);
//   - a circuit breaker per worker thread stops calling after global.breaker.failures consecutive
//     failures, for global.breaker.cooldown, then lets one probe through; while it is open the
//     fallback applies without waiting for a timeout;
//   - an over-limit cache in shared data remembers a key the service denied until its Retry-After, and
//     answers it locally without calling the service (like envoyproxy/ratelimit's local cache).

// globalItem is one global rule that applies to a paused request.
type globalItem struct {
	rs   *ruleState
	spec []rules.LimitSpec // the rule's limits for this key (an override's, or the rule's own)
	key  string            // the rule's key value
	cost int64
	// permit is the id of the permit a global concurrency limit acquires (global_concurrency.go).
	permit string
	// fromBody: cost is read from the request body, and the call waits for it (settle_global.go).
	fromBody bool
}

// globalClient is a plugin's connection to the decision service: the prepared call headers and the
// circuit breaker of this worker thread.
type globalClient struct {
	cfg     *rules.Global
	headers [][2]string
	timeout uint32 // ms
	breaker breaker
	metrics globalMetrics
	body    []byte

	waiting   []*httpContext // paused requests whose call is not answered yet, checked every tick
	nextLogAt int64          // when a refused check may be logged again
	permits   globalPermits  // the permits this worker's streams hold (global_concurrency.go)
}

// deadlineSlack is how long after global.timeout the filter gives up on a call itself: the host's
// timeout (a 504 answer) normally comes first.
const deadlineSlack = 5 * time.Millisecond

// rejectLogEvery bounds the warnings about refused checks: one per worker per period.
const rejectLogEvery = 10 * time.Second

func newGlobalClient(g *rules.Global) *globalClient {
	h := [][2]string{{":method", "POST"}, {":path", g.Path}, {":authority", g.Authority}, {"content-type", wire.ContentType}}
	if g.Secret != "" {
		h = append(h, [2]string{wire.SecretHeader, g.Secret})
	}
	return &globalClient{
		cfg:     g,
		headers: h,
		timeout: uint32((g.Timeout + time.Millisecond - 1) / time.Millisecond),
		breaker: breaker{threshold: g.BreakerFailures, cooldown: int64(g.BreakerCooldown)},
		metrics: defineGlobalMetrics(),
	}
}

// breaker is a consecutive-failure circuit breaker. It belongs to one VM (one worker thread): Envoy
// gives each thread its own, so one thread's probe does not depend on another's.
type breaker struct {
	threshold int
	cooldown  int64
	failures  int
	openUntil int64
	probing   bool
}

// allow reports whether a call may be made at now: always while closed; after the cooldown, one
// probe at a time.
func (b *breaker) allow(now int64) bool {
	if b.failures < b.threshold {
		return true
	}
	if now < b.openUntil || b.probing {
		return false
	}
	b.probing = true
	return true
}

func (b *breaker) success() { b.failures, b.probing = 0, false }

// failure records a failed call and reports whether it opened the breaker.
func (b *breaker) failure(now int64) (opened bool) {
	wasProbe := b.probing
	b.probing = false
	b.failures++
	if b.failures >= b.threshold {
		b.openUntil = now + b.cooldown
		return b.failures == b.threshold || wasProbe
	}
	return false
}

// checkGlobal decides the global items of the current request: from the over-limit cache, from the
// fallback when the breaker is open, or by calling the service (then it pauses the request).
func (h *httpContext) checkGlobal(now int64) types.Action {
	p := h.plugin
	s := &p.scratch
	for i := range s.globals {
		it := &s.globals[i]
		if idx, until, ok := p.blocked(it, now); ok && !it.rs.rule.Shadow {
			it.rs.metrics.cachedDenials.Increment(1)
			it.rs.metrics.limited.Increment(1)
			s.resp.denier = it.rs
			d := cachedDenial(&it.spec[idx], until-now)
			s.outcomes = append(s.outcomes, rules.Outcome{Limit: &it.spec[idx], Decision: d, Partition: p.cfg.Response.PartitionString(it.rs.rule, it.key)})
			h.deny()
			return types.ActionPause
		}
	}
	g := p.global
	if !g.breaker.allow(now) {
		g.metrics.shortCircuited.Increment(1)
		return h.finishGlobal(h.fallback(s.globals, now), false, now)
	}
	p.assignPermits(s.globals, h.id)
	g.body = appendCheckBody(g.body[:0], p.name, s.globals)
	if _, err := proxywasm.DispatchHttpCall(g.cfg.Cluster, g.headers, g.body, nil, g.timeout, h.onGlobalResponse); err != nil {
		// BadArgument: the cluster is unknown to this proxy (Istio: outside the sidecar's egress).
		g.metrics.failures.Increment(1)
		if g.breaker.failure(now) {
			g.metrics.breakerOpened.Increment(1)
		}
		proxywasm.LogWarnf("meshlimit: calling cluster %q: %v", g.cfg.Cluster, err)
		return h.finishGlobal(h.fallback(s.globals, now), false, now)
	}
	g.metrics.calls.Increment(1)
	h.calls++ // onGlobalResponse is bound to h: h is not recycled until it has run
	// Other requests reuse the scratch space while this one waits: keep what the answer needs.
	h.globals = append(h.globals[:0], s.globals...)
	h.localOutcomes = append(h.localOutcomes[:0], s.outcomes...)
	h.delay = s.delay
	h.deadline = now + int64(g.cfg.Timeout+deadlineSlack)
	g.waiting = append(g.waiting, h)
	return types.ActionPause
}

// unwait takes h off the list of requests waiting for an answer.
func (g *globalClient) unwait(h *httpContext) {
	h.deadline = 0
	for i, w := range g.waiting {
		if w == h {
			last := len(g.waiting) - 1
			g.waiting[i], g.waiting[last] = g.waiting[last], nil
			g.waiting = g.waiting[:last]
			return
		}
	}
}

// expireCalls, on a tick, gives up on every call not answered by its deadline: the request is decided
// as for a failed call (fallback, or failure_mode) and resumed; the answer, if it ever comes, is
// ignored. A request whose stream is gone is just forgotten.
func (p *pluginContext) expireCalls(now int64) {
	g := p.global
	if g == nil {
		return
	}
	g.renewPermits(p.name, now)
	g.releaseDeferred(p.name, now)
	for i := 0; i < len(g.waiting); {
		h := g.waiting[i]
		if h.deadline > now {
			i++
			continue
		}
		g.unwait(h)
		if proxywasm.SetEffectiveContext(h.id) != nil {
			continue
		}
		g.metrics.deadlineExpired.Increment(1)
		h.expire(now)
	}
}

// expire decides a request whose call passed its deadline, as for a failed call.
func (h *httpContext) expire(now int64) {
	if h.chargeExpired() {
		return
	}
	defer h.recoverPaused("the call deadline")
	h.restoreScratch()
	h.globalFailed(errors.New("no answer by the deadline"), now)
}

// restoreScratch puts back, in the scratch space, what a paused request had decided before its call.
func (h *httpContext) restoreScratch() {
	s := &h.plugin.scratch
	s.req.reset() // the scratch request view may hold another stream's values
	s.outcomes = append(s.outcomes[:0], h.localOutcomes...)
	s.delay = h.delay
}

// globalFailed decides a paused request whose call failed: a refused check (4xx) by each rule's
// failure_mode, anything else (an outage) by the fallback, counting towards the breaker.
func (h *httpContext) globalFailed(err error, now int64) {
	p, g := h.plugin, h.plugin.global
	defer g.releaseItems(h.globals, now) // what the call may have acquired before it failed
	var se *statusError
	if errors.As(err, &se) && se.rejected() {
		g.metrics.rejected.Increment(1)
		if now >= g.nextLogAt {
			g.nextLogAt = now + int64(rejectLogEvery)
			proxywasm.LogWarnf("meshlimit: the decision service refused the check (%v); each rule's failure_mode applies (this warning: at most once per %v per worker; meshlimit.global.rejected counts them)", err, rejectLogEvery)
		}
		h.finishGlobal(h.failureMode(h.globals), true, now)
		return
	}
	g.metrics.failures.Increment(1)
	if g.breaker.failure(now) {
		g.metrics.breakerOpened.Increment(1)
	}
	if p.cfg.LogLevel <= rules.LogDebug {
		proxywasm.LogDebugf("meshlimit: global service: %v", err)
	}
	h.finishGlobal(h.fallback(h.globals, now), true, now)
}

// failureMode decides items by their rules' failure_mode alone and reports whether the request is
// denied.
func (h *httpContext) failureMode(items []globalItem) (denied bool) {
	for i := range items {
		rs := items[i].rs
		if rs.rule.FailureMode == rules.FailDeny && !rs.rule.Shadow {
			rs.metrics.failureDenied.Increment(1)
			return true
		}
	}
	return false
}

// onGlobalResponse is the proxy_http_call callback. The SDK calls it with the paused stream as the
// effective context (and not at all if the stream is gone).
func (h *httpContext) onGlobalResponse(numHeaders, bodySize, _ int) {
	p, g := h.plugin, h.plugin.global
	h.calls--
	if h.deadline == 0 {
		g.metrics.lateAnswers.Increment(1) // the request was decided at its deadline
		return
	}
	sent := h.deadline - int64(g.cfg.Timeout+deadlineSlack) // settle_global.go: the reservations are no older
	g.unwait(h)
	defer h.recoverPaused("the service's answer")
	testPanic(panicServiceAnswer)
	s := &p.scratch
	h.restoreScratch()
	now := abi.UnixNano()
	decisions, err := readCheckResponse(numHeaders, bodySize, descriptorCount(h.globals))
	if err != nil {
		h.globalFailed(err, now)
		return
	}
	g.breaker.success()
	denied := false
	j := 0
	for i := range h.globals {
		it := &h.globals[i]
		r := it.rs.rule
		enforced := !r.Shadow
		allowed := true
		pk := p.cfg.Response.PartitionString(r, it.key)
		for k := range it.spec {
			d := decisions[j]
			j++
			if d.Skipped {
				continue
			}
			allowed = allowed && d.Allowed
			if enforced {
				s.outcomes = append(s.outcomes, rules.Outcome{Limit: &it.spec[k], Decision: d.Algorithms(), Partition: pk})
				if d.Allowed {
					s.delay = max(s.delay, d.DelayMs*int64(time.Millisecond)) // a global leaky bucket shapes too
				}
			}
			if !d.Allowed && d.RetryAfterMs > 0 {
				p.block(it, k, now+d.RetryAfterMs*int64(time.Millisecond))
			}
		}
		p.nearLimitWire(it.rs, decisions[j-len(it.spec):j], it.spec)
		if p.count(it.rs, allowed, enforced) { // every rule is counted, even after a denial
			denied = true
		}
	}
	h.reserveGlobal(decisions, sent) // settle_global.go
	g.holdPermits(h.id, h.globals, decisions)
	h.finishGlobal(denied, true, now)
}

// finishGlobal ends the global decision: a denial sends the local response; a shaping delay holds
// the request until its turn; otherwise the request continues (resumed, when it was paused). It
// returns the action for a decision made in OnHttpRequestHeaders.
func (h *httpContext) finishGlobal(denied, paused bool, now int64) types.Action {
	s := &h.plugin.scratch
	if denied {
		h.deny()
		return types.ActionPause
	}
	if st := h.settle; st != nil && st.global {
		h.keepForBody() // settle_global.go: the headers' decision; the body's items are still to come
	}
	if len(s.outcomes) > 0 && h.plugin.cfg.Response.QuotaHeadersOnAllowed {
		h.setQuota(s.outcomes)
	}
	if s.delay > 0 {
		h.plugin.shaper.hold(h.id, now+s.delay)
		return types.ActionPause
	}
	if paused {
		if err := proxywasm.ResumeHttpRequest(); err != nil {
			proxywasm.LogErrorf("meshlimit: resuming the request: %v", err)
		}
	}
	return types.ActionContinue
}

// fallback decides items without the service: each rule's fallback limits in shared data, or its
// failure mode. It reports whether the request is denied.
func (h *httpContext) fallback(items []globalItem, now int64) (denied bool) {
	p := h.plugin
	for i := range items {
		it := &items[i]
		rs, r := it.rs, it.rs.rule
		rs.metrics.fallback.Increment(1)
		if rs.fbPermits != nil {
			if h.acquireFallbackPermit(it, now) {
				return true
			}
			continue
		}
		if rs.fallback == nil {
			if r.FailureMode == rules.FailDeny && !r.Shadow {
				rs.metrics.failureDenied.Increment(1)
				return true
			}
			continue
		}
		out, err := p.limiter.Take(rs.fallback, []byte(it.key), now, it.cost)
		if err := p.updated(rs, out.Attempts, err); err != nil {
			if p.failed(rs, !r.Shadow) {
				return true
			}
			continue
		}
		if !r.Shadow {
			pk := p.cfg.Response.PartitionString(r, it.key)
			for k, fb := 0, r.Fallback(); k < len(fb.Limits); k++ {
				p.scratch.outcomes = append(p.scratch.outcomes, rules.Outcome{Limit: &fb.Limits[k], Decision: out.Decisions[k], Partition: pk})
			}
		}
		if p.count(rs, out.Allowed, !r.Shadow) {
			return true
		}
	}
	return false
}

// count records a rule's decision in its metrics (and tags a shadow denial) and reports whether it
// denies the request.
func (p *pluginContext) count(rs *ruleState, allowed, enforced bool) (denied bool) {
	switch {
	case allowed:
		rs.metrics.allowed.Increment(1)
	case enforced:
		rs.metrics.limited.Increment(1)
		p.scratch.resp.denier = rs
		return true
	default:
		rs.metrics.shadowLimited.Increment(1)
		if rs.rule.ShadowHeader != "" {
			_ = proxywasm.AddHttpRequestHeader(rs.rule.ShadowHeader, rs.rule.Name)
		}
	}
	return false
}

// globalMetrics are the plugin's counters for the global service:
//
//	meshlimit.global.calls            calls made to the service
//	meshlimit.global.failures         calls that failed (timeout, 5xx, bad body, reset, no answer by the deadline)
//	meshlimit.global.rejected         checks the service refused (4xx): each rule's failure_mode applied
//	meshlimit.global.deadline_expired calls the filter gave up on itself (the host's timeout never answered)
//	meshlimit.global.late_answers     answers that came after the filter gave up, ignored
//	meshlimit.global.breaker_opened   times the circuit breaker opened
//	meshlimit.global.short_circuited  requests decided by the fallback because the breaker was open
//	meshlimit.global.lease_calls      calls made to lease quota (not counted in calls)
//	meshlimit.global.permit_calls     calls that renew or release concurrency permits (not counted in calls)
//	meshlimit.global.permit_failures  those of them that failed (the permits' leases cover them)
//	meshlimit.global.permits_lost     permits a renewal found gone (their lease had ended, or Redis restarted): no longer renewed
type globalMetrics struct {
	calls, failures, breakerOpened, shortCircuited, leaseCalls proxywasm.MetricCounter
	rejected, deadlineExpired, lateAnswers                     proxywasm.MetricCounter
	permitCalls, permitFailures, permitsLost                   proxywasm.MetricCounter
}

func defineGlobalMetrics() globalMetrics {
	return globalMetrics{
		calls:          proxywasm.DefineCounterMetric("meshlimit.global.calls"),
		failures:       proxywasm.DefineCounterMetric("meshlimit.global.failures"),
		breakerOpened:  proxywasm.DefineCounterMetric("meshlimit.global.breaker_opened"),
		shortCircuited: proxywasm.DefineCounterMetric("meshlimit.global.short_circuited"),
		leaseCalls:     proxywasm.DefineCounterMetric("meshlimit.global.lease_calls"),

		rejected:        proxywasm.DefineCounterMetric("meshlimit.global.rejected"),
		deadlineExpired: proxywasm.DefineCounterMetric("meshlimit.global.deadline_expired"),
		lateAnswers:     proxywasm.DefineCounterMetric("meshlimit.global.late_answers"),

		permitCalls:    proxywasm.DefineCounterMetric("meshlimit.global.permit_calls"),
		permitFailures: proxywasm.DefineCounterMetric("meshlimit.global.permit_failures"),
		permitsLost:    proxywasm.DefineCounterMetric("meshlimit.global.permits_lost"),
	}
}
