package filter

import (
	"errors"
	"time"

	"github.com/meshlimit/meshlimit/rules"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/meshlimit/meshlimit/abi"
	"github.com/meshlimit/meshlimit/sharedstate"
)

// The global path: rules with scope "global" (or "both") are decided by the decision service
// (cmd/meshlimit-service), called through an Envoy cluster with one proxy_http_call per request that
// carries every global descriptor of the request. The request is paused until the answer arrives, then
// resumed or answered with the local response.
//
// A limiter failure must never take the site down:
//   - the call has a timeout (global.timeout, default 20ms);
//   - a failed call (timeout, non-200 answer, unreadable body, reset) applies each rule's fallback
//     limits in this proxy's shared data, or, without a fallback, its failure_mode (allow by default);
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
}

func newGlobalClient(g *rules.Global) *globalClient {
	h := [][2]string{{":method", "POST"}, {":path", g.Path}, {":authority", g.Authority}, {"content-type", "application/json"}}
	if g.Secret != "" {
		h = append(h, [2]string{"x-meshlimit-secret", g.Secret})
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
			d := cachedDenial(&it.spec[idx], until-now)
			s.outcomes = append(s.outcomes, rules.Outcome{Limit: &it.spec[idx], Decision: d})
			h.deny()
			return types.ActionPause
		}
	}
	g := p.global
	if !g.breaker.allow(now) {
		g.metrics.shortCircuited.Increment(1)
		return h.finishGlobal(h.fallback(s.globals, now), false, now)
	}
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
	// Other requests reuse the scratch space while this one waits: keep what the answer needs.
	h.globals = append(h.globals[:0], s.globals...)
	h.localOutcomes = append(h.localOutcomes[:0], s.outcomes...)
	h.delay = s.delay
	return types.ActionPause
}

// onGlobalResponse is the proxy_http_call callback. The SDK calls it with the paused stream as the
// effective context (and not at all if the stream is gone).
func (h *httpContext) onGlobalResponse(numHeaders, bodySize, _ int) {
	p, g := h.plugin, h.plugin.global
	s := &p.scratch
	s.req.reset() // the scratch request view may hold another stream's values
	s.outcomes = append(s.outcomes[:0], h.localOutcomes...)
	s.delay = h.delay
	now := abi.UnixNano()
	decisions, err := readCheckResponse(numHeaders, bodySize, descriptorCount(h.globals))
	if err != nil {
		g.metrics.failures.Increment(1)
		if g.breaker.failure(now) {
			g.metrics.breakerOpened.Increment(1)
		}
		if p.cfg.LogLevel <= rules.LogDebug {
			proxywasm.LogDebugf("meshlimit: global service: %v", err)
		}
		h.finishGlobal(h.fallback(h.globals, now), true, now)
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
		for k := range it.spec {
			d := decisions[j]
			j++
			if d.Skipped {
				continue
			}
			allowed = allowed && d.Allowed
			if enforced {
				s.outcomes = append(s.outcomes, rules.Outcome{Limit: &it.spec[k], Decision: d.decision()})
				if d.Allowed {
					s.delay = max(s.delay, d.DelayMs*int64(time.Millisecond)) // a global leaky bucket shapes too
				}
			}
			if !d.Allowed && d.RetryAfterMs > 0 {
				p.block(it, k, now+d.RetryAfterMs*int64(time.Millisecond))
			}
		}
		if p.count(it.rs, allowed, enforced) { // every rule is counted, even after a denial
			denied = true
		}
	}
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
	if len(s.outcomes) > 0 && h.plugin.cfg.Response.QuotaHeadersOnAllowed {
		h.quota = append(h.inline[:0], s.outcomes...)
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
		if rs.fallback == nil {
			if r.FailureMode == rules.FailDeny && !r.Shadow {
				rs.metrics.failureDenied.Increment(1)
				return true
			}
			continue
		}
		out, err := p.limiter.Take(rs.fallback, []byte(it.key), now, it.cost)
		if err != nil {
			if errors.Is(err, sharedstate.ErrContention) {
				rs.metrics.casExhausted.Increment(1)
			}
			if r.FailureMode == rules.FailDeny && !r.Shadow {
				rs.metrics.failureDenied.Increment(1)
				return true
			}
			continue
		}
		if !r.Shadow {
			for k, fb := 0, r.Fallback(); k < len(fb.Limits); k++ {
				p.scratch.outcomes = append(p.scratch.outcomes, rules.Outcome{Limit: &fb.Limits[k], Decision: out.Decisions[k]})
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
//	meshlimit.global.failures         calls that failed (timeout, error status, bad body, reset)
//	meshlimit.global.breaker_opened   times the circuit breaker opened
//	meshlimit.global.short_circuited  requests decided by the fallback because the breaker was open
//	meshlimit.global.lease_calls      calls made to lease quota (not counted in calls)
type globalMetrics struct {
	calls, failures, breakerOpened, shortCircuited, leaseCalls proxywasm.MetricCounter
}

func defineGlobalMetrics() globalMetrics {
	return globalMetrics{
		calls:          proxywasm.DefineCounterMetric("meshlimit.global.calls"),
		failures:       proxywasm.DefineCounterMetric("meshlimit.global.failures"),
		breakerOpened:  proxywasm.DefineCounterMetric("meshlimit.global.breaker_opened"),
		shortCircuited: proxywasm.DefineCounterMetric("meshlimit.global.short_circuited"),
		leaseCalls:     proxywasm.DefineCounterMetric("meshlimit.global.lease_calls"),
	}
}
