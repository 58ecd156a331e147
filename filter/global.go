package filter

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/meshlimit/meshlimit/internal/fnv"
	"github.com/meshlimit/meshlimit/rules"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/meshlimit/meshlimit/abi"
	"github.com/meshlimit/meshlimit/algorithms"
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

// The over-limit cache: one table of blocked-until entries per rule, in shared data, so that every
// worker thread answers a key the service denied without calling it again until its Retry-After. A
// slot holds the key's fingerprint, the time until which it is blocked and the index of the limit that
// denied; writes are unconditional (cas 0): a lost entry only costs one more call.

const blockedEntrySize = 17

func (p *pluginContext) blockedSlot(it *globalItem) (key string, fp uint64) {
	fp = fnv.String(it.key) ^ it.rs.rule.Fingerprint()
	slot := fp % uint64(it.rs.rule.MaxKeys)
	return it.rs.blockedPrefix + strconv.FormatUint(slot, 36), fp
}

func (p *pluginContext) blocked(it *globalItem, now int64) (idx int, until int64, ok bool) {
	key, fp := p.blockedSlot(it)
	v, _, err := p.store.Get(key)
	if err != nil || len(v) != blockedEntrySize || binary.LittleEndian.Uint64(v) != fp {
		return 0, 0, false
	}
	until, idx = int64(binary.LittleEndian.Uint64(v[8:])), int(v[16])
	if until <= now || idx >= len(it.spec) {
		return 0, 0, false
	}
	return idx, until, true
}

func (p *pluginContext) block(it *globalItem, idx int, until int64) {
	key, fp := p.blockedSlot(it)
	var v [blockedEntrySize]byte
	binary.LittleEndian.PutUint64(v[:], fp)
	binary.LittleEndian.PutUint64(v[8:], uint64(until))
	v[16] = byte(idx)
	_ = p.store.Set(key, v[:], 0)
}

// checkDecision is one decision of the service's answer (service/API.md).
type checkDecision struct {
	Allowed      bool  `json:"allowed"`
	Limit        int64 `json:"limit"`
	Remaining    int64 `json:"remaining"`
	ResetMs      int64 `json:"reset_ms"`
	RetryAfterMs int64 `json:"retry_after_ms"` // -1: never (the cost exceeds the capacity)
	DelayMs      int64 `json:"delay_ms"`
	Skipped      bool  `json:"skipped"`
}

func (d *checkDecision) decision() (out algorithms.Decision) {
	out.Allowed, out.Limit, out.Remaining = d.Allowed, d.Limit, max(d.Remaining, 0)
	out.Reset = time.Duration(d.ResetMs) * time.Millisecond
	switch {
	case d.RetryAfterMs < 0:
		out.RetryAfter = algorithms.RetryNever
	case !d.Allowed:
		out.RetryAfter = time.Duration(d.RetryAfterMs) * time.Millisecond
	}
	return out
}

func cachedDenial(spec *rules.LimitSpec, wait int64) (d algorithms.Decision) {
	d.Limit = spec.Limit.Quota
	d.RetryAfter = time.Duration(wait)
	d.Reset = time.Duration(wait)
	return d
}

type checkResponse struct {
	Allowed   bool            `json:"allowed"`
	Decisions []checkDecision `json:"decisions"`
}

// readCheckResponse reads the service's answer in an http-call callback. Anything but a 200 with a
// well-formed body of n decisions is a failure: a timeout (Envoy answers 504), no healthy upstream
// (503), an error of the service (503 when its store is down), a reset (no headers at all).
func readCheckResponse(numHeaders, bodySize, n int) ([]checkDecision, error) {
	if numHeaders == 0 {
		return nil, errors.New("the call failed (reset)")
	}
	headers, err := proxywasm.GetHttpCallResponseHeaders()
	if err != nil {
		return nil, fmt.Errorf("reading the headers: %w", err)
	}
	status := ""
	for _, h := range headers {
		if h[0] == ":status" {
			status = h[1]
		}
	}
	if status != "200" {
		return nil, fmt.Errorf("status %s", status)
	}
	if bodySize == 0 || bodySize > maxCheckResponse {
		return nil, fmt.Errorf("body of %d bytes", bodySize)
	}
	body, err := proxywasm.GetHttpCallResponseBody(0, bodySize)
	if err != nil {
		return nil, fmt.Errorf("reading the body: %w", err)
	}
	var r checkResponse
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("decoding the body: %w", err)
	}
	if len(r.Decisions) != n {
		return nil, fmt.Errorf("%d decisions for %d descriptors", len(r.Decisions), n)
	}
	return r.Decisions, nil
}

const maxCheckResponse = 1 << 20

// descriptorCount counts the descriptors items send: one per limit.
func descriptorCount(items []globalItem) int {
	n := 0
	for i := range items {
		n += len(items[i].spec)
	}
	return n
}

// appendCheckBody appends the /v1/check request for items: one descriptor per limit, keyed by plugin,
// rule, limit fingerprint and key value, so that different plugins, rules and limit definitions never
// share a counter in the service.
func appendCheckBody(b []byte, plugin string, items []globalItem) []byte {
	b = append(b, `{"descriptors":[`...)
	first := true
	for i := range items {
		it := &items[i]
		for k := range it.spec {
			spec := &it.spec[k]
			if !first {
				b = append(b, ',')
			}
			first = false
			b = append(b, `{"key":"`...)
			b = appendJSONString(b, plugin)
			b = append(b, '/')
			b = appendJSONString(b, it.rs.rule.Name)
			b = append(b, '/')
			b = strconv.AppendUint(b, spec.Fingerprint, 36)
			b = append(b, '/')
			b = appendServiceKey(b, it.key)
			b = append(b, `","algorithm":"`...)
			b = append(b, spec.Limit.Kind.String()...)
			b = append(b, `","quota":`...)
			b = strconv.AppendInt(b, spec.Limit.Quota, 10)
			b = append(b, `,"window_ms":`...)
			b = strconv.AppendInt(b, int64(spec.Limit.Window/time.Millisecond), 10)
			if spec.Limit.Burst != 0 {
				b = append(b, `,"burst":`...)
				b = strconv.AppendInt(b, spec.Limit.Burst, 10)
			}
			b = append(b, `,"cost":`...)
			b = strconv.AppendInt(b, it.cost, 10)
			b = append(b, '}')
		}
	}
	return append(b, "]}"...)
}

// maxServiceKeyValue bounds the key value part of a descriptor key; the service accepts 512 bytes.
const maxServiceKeyValue = 256

// appendServiceKey appends a key value the service accepts: as is when it is short, valid UTF-8
// without control characters; otherwise "#" and two FNV-64a hashes in hex, which keep distinct values
// apart.
func appendServiceKey(b []byte, v string) []byte {
	clean := len(v) <= maxServiceKeyValue && utf8.ValidString(v)
	for i := 0; clean && i < len(v); i++ {
		clean = v[i] >= 0x20 && v[i] != 0x7f
	}
	if clean {
		return appendJSONString(b, v)
	}
	b = append(b, '#')
	b = strconv.AppendUint(b, fnv.String(v), 16)
	b = append(b, '-')
	return strconv.AppendUint(b, fnv.String(v+"\x00"), 16)
}

// appendJSONString appends s, which has no control characters, escaped for a JSON string.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == '"' || c == '\\' {
			b = append(b, '\\')
		}
		b = append(b, s[i])
	}
	return b
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
