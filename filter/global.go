package filter

import (
	"errors"
	"time"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/meshlimit/meshlimit/rules"
	"github.com/meshlimit/meshlimit/wire"
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
	// fromBody: cost is read from the request body, and the call waits for it (body.go).
	fromBody bool
}

// callStream is what a stream that waits for the service's answer keeps of its request while other
// requests reuse the decision.
type callStream struct {
	items    []globalItem    // what the service was asked
	outcomes []rules.Outcome // the outcomes of the local rules already decided
	delay    int64           // and the shaping delay they asked for
	deadline int64           // when to stop waiting (unix ns); 0 when not waiting
}

// globalClient is a plugin's connection to the decision service: the prepared call headers, the
// circuit breaker of this worker thread, and the paused requests whose call is out.
type globalClient struct {
	*env
	cfg     *rules.Global
	headers [][2]string
	trace   traceContext // the check call's headers: headers and the request's trace context
	timeout uint32       // ms
	breaker breaker
	metrics globalMetrics
	body    []byte
	answer  []wire.Decision // the decisions of the last answer read (readCheck)

	waiting   []*httpContext // paused requests whose call is not answered yet, checked every tick
	nextLogAt int64          // when a refused check may be logged again
	permits   globalPermits  // the permits this worker's streams hold (global_concurrency.go)

	leases  *leaser
	local   *permits // the local fallback of a global concurrency rule
	settle  *settler
	cache   *overLimitCache
	charges *charger
}

// deadlineSlack is how long after global.timeout the filter gives up on a call itself: the host's
// timeout (a 504 answer) normally comes first.
const deadlineSlack = 5 * time.Millisecond

// rejectLogEvery bounds the warnings about refused checks: one per worker per period.
const rejectLogEvery = 10 * time.Second

func newGlobalClient(e *env, g *rules.Global, owner uint64) *globalClient {
	h := [][2]string{{":method", "POST"}, {":path", g.Path}, {":authority", g.Authority}, {"content-type", wire.ContentType}}
	if g.Secret != "" {
		h = append(h, [2]string{wire.SecretHeader, g.Secret})
	}
	c := &globalClient{
		env:     e,
		cfg:     g,
		headers: h,
		trace:   newTraceContext(),
		timeout: uint32((g.Timeout + time.Millisecond - 1) / time.Millisecond),
		breaker: breaker{threshold: g.BreakerFailures, cooldown: int64(g.BreakerCooldown)},
		metrics: defineGlobalMetrics(e.host),
		answer:  make([]wire.Decision, 0, wire.MaxDescriptors),
	}
	c.permits = globalPermits{g: c, owner: owner}
	return c
}

// queue queues a global (or both) rule's decision for the service, unless leased units admit the
// request at once. It reports whether nothing is left to decide locally.
func (g *globalClient) queue(rs *ruleState, set *rules.LimitSet, key []byte, cost, now int64) (done bool) {
	r := rs.rule
	it := globalItem{rs: rs, spec: set.Limits, key: string(key), cost: cost}
	if r.Lease() != nil && g.leases.spend(&it, now) {
		rs.metrics.leaseSpent.inc(1)
		rs.metrics.allowed.inc(1)
		return true
	}
	g.d.globals = append(g.d.globals, it)
	if r.Lease() != nil {
		g.leases.want(&it, now)
	}
	return r.Scope == rules.ScopeGlobal
}

// check decides the global items of the current request: from the over-limit cache, from the
// fallback when the breaker is open, or by calling the service (then it pauses the request).
func (g *globalClient) check(h *httpContext, now int64) types.Action {
	d := &g.d
	for i := range d.globals {
		it := &d.globals[i]
		if idx, until, ok := g.cache.blocked(it, now); ok && !it.rs.rule.Shadow {
			it.rs.metrics.cachedDenials.inc(1)
			it.rs.metrics.limited.inc(1)
			d.denier = it.rs
			d.outcome(&it.spec[idx], cachedDenial(&it.spec[idx], until-now), g.env.cfg.Response.PartitionString(it.rs.rule, it.key), now)
			h.deny()
			return types.ActionPause
		}
	}
	if !g.breaker.allow(now) {
		g.metrics.shortCircuited.inc(1)
		return h.finish(g.fallback(h, d.globals, now), false, now)
	}
	g.permits.assign(d.globals, h.id)
	g.body = appendCheckBody(g.body[:0], g.name, d.globals)
	if err := g.host.dispatch(g.cfg.Cluster, g.trace.callHeaders(g.host, g.headers), g.body, g.timeout, func(numHeaders, bodySize, _ int) {
		g.onAnswer(h, numHeaders, bodySize)
	}); err != nil {
		// BadArgument: the cluster is unknown to this proxy (Istio: outside the sidecar's egress).
		g.failure(now)
		logf(g.host, logWarn, "meshlimit: calling cluster %q: %v", g.cfg.Cluster, err)
		return h.finish(g.fallback(h, d.globals, now), false, now)
	}
	g.metrics.calls.inc(1)
	g.charges.checked(h, d.globals, true)
	h.calls++ // onAnswer is bound to h: h is not recycled until it has run
	// Other requests reuse the decision while this one waits: keep what the answer needs.
	c := &h.call
	c.items = append(c.items[:0], d.globals...)
	c.outcomes = append(c.outcomes[:0], d.outcomes...)
	c.delay = d.delay
	g.wait(h, now)
	return types.ActionPause
}

// wait puts h on the list of requests waiting for an answer, until the call's deadline.
func (g *globalClient) wait(h *httpContext, now int64) {
	h.call.deadline = now + int64(g.cfg.Timeout+deadlineSlack)
	g.waiting = append(g.waiting, h)
}

// unwait takes h off the list of requests waiting for an answer.
func (g *globalClient) unwait(h *httpContext) {
	h.call.deadline = 0
	for i, w := range g.waiting {
		if w == h {
			last := len(g.waiting) - 1
			g.waiting[i], g.waiting[last] = g.waiting[last], nil
			g.waiting = g.waiting[:last]
			return
		}
	}
}

// endStream, at the end of a stream, forgets the call it still waits for (the client left): its
// answer never comes to a stream gone.
func (g *globalClient) endStream(h *httpContext) {
	if h.call.deadline != 0 {
		g.unwait(h)
	}
}

// failure counts a failed call towards the breaker.
func (g *globalClient) failure(now int64) {
	g.metrics.failures.inc(1)
	if g.breaker.failure(now) {
		g.metrics.breakerOpened.inc(1)
	}
}

// tick renews and releases the global permits, and gives up on every call not answered by its
// deadline: the request is decided as for a failed call (fallback, or failure_mode) and resumed; the
// answer, if it ever comes, is ignored. A request whose stream is gone is just forgotten.
func (g *globalClient) tick(now int64) {
	g.permits.renew(now)
	g.permits.releaseDeferred(now)
	for i := 0; i < len(g.waiting); {
		h := g.waiting[i]
		if h.call.deadline > now {
			i++
			continue
		}
		g.unwait(h)
		if !g.host.enter(h.id) {
			continue
		}
		g.metrics.deadlineExpired.inc(1)
		g.expire(h, now)
	}
}

// expire decides a request whose call passed its deadline, as for a failed call.
func (g *globalClient) expire(h *httpContext, now int64) {
	if g.charges.expired(h) {
		return
	}
	defer h.recoverPaused("the call deadline")
	g.d.restore(&h.call)
	g.failed(h, errors.New("no answer by the deadline"), now)
}

// failed decides a paused request whose call failed: a refused check (4xx) by each rule's
// failure_mode, anything else (an outage) by the fallback, counting towards the breaker.
func (g *globalClient) failed(h *httpContext, err error, now int64) {
	items := h.call.items
	defer g.permits.releaseItems(items, now) // what the call may have acquired before it failed
	g.charges.checked(h, items, false)
	var se *statusError
	if errors.As(err, &se) && se.rejected() {
		g.metrics.rejected.inc(1)
		if now >= g.nextLogAt {
			g.nextLogAt = now + int64(rejectLogEvery)
			logf(g.host, logWarn, "meshlimit: the decision service refused the check (%v); each rule's failure_mode applies (this warning: at most once per %v per worker; meshlimit.global.rejected counts them)", err, rejectLogEvery)
		}
		h.finish(failureMode(items), true, now)
		return
	}
	g.failure(now)
	if g.debugging() {
		logf(g.host, logDebug, "meshlimit: global service: %v", err)
	}
	h.finish(g.fallback(h, items, now), true, now)
}

// failureMode decides items by their rules' failure_mode alone and reports whether the request is
// denied.
func failureMode(items []globalItem) (denied bool) {
	for i := range items {
		rs := items[i].rs
		if rs.rule.FailureMode == rules.FailDeny && !rs.rule.Shadow {
			rs.metrics.failureDenied.inc(1)
			return true
		}
	}
	return false
}

// onAnswer is the callback of a check. The host calls it with the paused stream as the current
// context (and not at all if the stream is gone).
func (g *globalClient) onAnswer(h *httpContext, numHeaders, bodySize int) {
	h.calls--
	if h.call.deadline == 0 {
		g.metrics.lateAnswers.inc(1) // the request was decided at its deadline
		return
	}
	sent := h.call.deadline - int64(g.cfg.Timeout+deadlineSlack) // settle_global.go: the reservations are no older
	g.unwait(h)
	defer h.recoverPaused("the service's answer")
	testPanic(g.host, panicServiceAnswer)
	g.d.restore(&h.call)
	now := g.host.now()
	decisions, err := g.readCheck(numHeaders, bodySize, descriptorCount(h.call.items))
	if err != nil {
		g.failed(h, err, now)
		return
	}
	g.breaker.success()
	boundAnswer(h.call.items, decisions, now)
	denied := g.apply(h.call.items, decisions, now)
	g.settle.reserveGlobal(h, decisions, sent)
	g.settle.takeGlobal(h, h.call.items, decisions, sent)
	g.charges.admitted(h, h.call.items, decisions, sent)
	g.permits.hold(h.id, h.call.items, decisions)
	h.finish(denied, true, now)
}

// apply records the service's decisions of items (one per limit, in order) and reports whether the
// request is denied; every rule is counted, even after a denial.
func (g *globalClient) apply(items []globalItem, decisions []wire.Decision, now int64) (denied bool) {
	d := &g.d
	for it, ds := range decidedItems(items, decisions) {
		r := it.rs.rule
		enforced := !r.Shadow
		allowed := true
		pk := g.env.cfg.Response.PartitionString(r, it.key)
		for k := range ds {
			dec := ds[k]
			if dec.Skipped {
				continue
			}
			allowed = allowed && dec.Allowed
			if enforced {
				d.outcome(&it.spec[k], dec.Algorithms(), pk, now)
				if dec.Allowed {
					d.delay = max(d.delay, dec.DelayMs*int64(time.Millisecond)) // a global leaky bucket shapes too
				}
			}
			if !dec.Allowed && dec.RetryAfterMs > 0 { // bounded to the ns: a calendar denial ends with its period
				g.cache.block(it, k, min(now+dec.RetryAfterMs*int64(time.Millisecond), now+int64(it.spec[k].LongestWait(now, r.Settle() != nil))))
			}
		}
		it.rs.nearLimitWire(ds, it.spec)
		if d.count(it.rs, allowed, enforced) {
			denied = true
		}
	}
	return denied
}

// fallback decides items without the service: each rule's fallback limits in shared data, or its
// failure mode. It reports whether the request is denied.
func (g *globalClient) fallback(h *httpContext, items []globalItem, now int64) (denied bool) {
	d := &g.d
	for i := range items {
		it := &items[i]
		rs, r := it.rs, it.rs.rule
		rs.metrics.fallback.inc(1)
		if rs.fbPermits != nil {
			if g.local.acquireFallback(h, it, now) {
				return true
			}
			continue
		}
		if rs.fallback == nil {
			if r.FailureMode == rules.FailDeny && !r.Shadow {
				rs.metrics.failureDenied.inc(1)
				return true
			}
			continue
		}
		out, err := g.limiter.Take(rs.fallback, []byte(it.key), now, it.cost)
		if err := g.updated(rs, out.Attempts, err); err != nil {
			if rs.failed(!r.Shadow) {
				return true
			}
			continue
		}
		if !r.Shadow {
			pk := g.env.cfg.Response.PartitionString(r, it.key)
			for k, fb := 0, r.Fallback(); k < len(fb.Limits); k++ {
				d.outcome(&fb.Limits[k], out.Decisions[k], pk, now)
			}
		}
		if d.count(rs, out.Allowed, !r.Shadow) {
			return true
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
//	meshlimit.global.give_back_calls  calls that give back a denied request's admissions (giveback_global.go)
//	meshlimit.global.give_back_failed those of them that were not sent or not applied
type globalMetrics struct {
	calls, failures, breakerOpened, shortCircuited, leaseCalls counter
	rejected, deadlineExpired, lateAnswers                     counter
	permitCalls, permitFailures, permitsLost                   counter
	giveBackCalls, giveBackFailed                              counter
}

func defineGlobalMetrics(h host) globalMetrics {
	return globalMetrics{
		calls:          newCounter(h, "meshlimit.global.calls"),
		failures:       newCounter(h, "meshlimit.global.failures"),
		breakerOpened:  newCounter(h, "meshlimit.global.breaker_opened"),
		shortCircuited: newCounter(h, "meshlimit.global.short_circuited"),
		leaseCalls:     newCounter(h, "meshlimit.global.lease_calls"),

		rejected:        newCounter(h, "meshlimit.global.rejected"),
		deadlineExpired: newCounter(h, "meshlimit.global.deadline_expired"),
		lateAnswers:     newCounter(h, "meshlimit.global.late_answers"),

		permitCalls:    newCounter(h, "meshlimit.global.permit_calls"),
		permitFailures: newCounter(h, "meshlimit.global.permit_failures"),
		permitsLost:    newCounter(h, "meshlimit.global.permits_lost"),

		giveBackCalls:  newCounter(h, "meshlimit.global.give_back_calls"),
		giveBackFailed: newCounter(h, "meshlimit.global.give_back_failed"),
	}
}
