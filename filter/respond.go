package filter

import (
	"errors"
	"strconv"
	"time"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/meshlimit/meshlimit/abi"
	"github.com/meshlimit/meshlimit/algorithms"
	"github.com/meshlimit/meshlimit/rules"
	"github.com/meshlimit/meshlimit/sharedstate"
	"github.com/meshlimit/meshlimit/wire"
)

// Response-conditioned counting (rules[].count_on). The request path only checks the key: it is
// denied while the key is in the penalty box (the rule's blocked records, owner-checked like every
// record: the over-limit cache of a global rule) or while its limits cannot admit the request's cost
// (sharedstate.Limiter.Check: nothing is written). An admitted request keeps its charge; the
// response headers decide it:
//   - a response that matches count_on charges the key (Take, or a call to the service for a
//     global rule, during which the response is paused); a charge that is denied, or that leaves a
//     limit unable to admit the same cost again, puts the key in the penalty box until now+penalty
//     (for a global rule without a penalty: until the service's Retry-After);
//   - a stream that ends without response headers (the client left first) is charged as a match
//     when count_unanswered is true (the default): leaving early never avoids the charge;
//   - the filter's own local reply is never charged (a denial drops the charges).
// The key is the one computed from the request when it arrived: a response cannot charge another key.

// charge is one counted rule's pending charge for an admitted request.
type charge struct {
	rs     *ruleState
	set    int    // the index of the limit set (an override's, or the rule's own)
	key    string // the rule's key value (in the context's chargeKeys: valid while the stream lives)
	keyLen int
	cost   int64
}

// respondState is what the request path hands to the response path through the scratch space.
type respondState struct {
	charges []charge // their keys are keyed ranges of keys until keepCharges
	keys    []byte
	denier  *ruleState // the enforced rule that denied the current request, or nil
	hash    []byte     // the denier's key hash, rendered (explain.go)
}

// penaltyRecords creates the blocked records of a counted local rule (a global rule has them as its
// over-limit cache already).
func (rs *ruleState) penaltyRecords(base, fp string) (err error) {
	if rs.rule.CountOn == nil || rs.blocked != nil {
		return nil
	}
	rs.blocked, err = sharedstate.NewRecords(base+"blocked/"+fp, rs.rule.MaxKeys)
	return err
}

// checkCounted is decide for a counted rule: it checks the key without charging it and reports
// whether the request is denied. An admitted request's charge is kept for its response.
func (p *pluginContext) checkCounted(rs *ruleState, set *rules.LimitSet, key []byte, cost, now int64) (denied bool) {
	s, r := &p.scratch, rs.rule
	enforced := p.cfg.Enforce && !r.Shadow && r.EnforcedFor(key)
	if idx, until, ok := p.penalized(rs, key, len(set.Limits), now); ok {
		rs.metrics.penaltyDenied.Increment(1)
		if enforced {
			s.outcomes = append(s.outcomes, rules.Outcome{Limit: &set.Limits[idx], Decision: cachedDenial(&set.Limits[idx], until-now),
				Partition: p.cfg.Response.Partition(r, key), Abnormal: true})
		}
		return p.count(rs, false, enforced)
	}
	allowed := true
	if r.Scope == rules.ScopeLocal {
		out, err := p.limiter.Check(rs.tables[set.Index], key, now, cost)
		if err != nil {
			proxywasm.LogWarnf("meshlimit: rule %s: %v", r.Name, err)
			return r.FailureMode == rules.FailDeny && enforced && p.count(rs, false, enforced)
		}
		allowed = out.Allowed
		if !allowed && enforced {
			pk := p.cfg.Response.Partition(r, key)
			for j := range set.Limits {
				s.outcomes = append(s.outcomes, rules.Outcome{Limit: &set.Limits[j], Decision: out.Decisions[j], Partition: pk})
			}
		}
	}
	if p.cfg.LogLevel <= rules.LogDebug {
		proxywasm.LogDebugf("meshlimit: rule %s key %q: checked (charged on a counted response): allowed=%t", r.Name, key, allowed)
	}
	if p.count(rs, allowed, enforced) {
		return true
	}
	s.resp.keys = append(s.resp.keys, key...) // keepCharges gives the key its string
	s.resp.charges = append(s.resp.charges, charge{rs: rs, set: set.Index, keyLen: len(key), cost: cost})
	return false
}

// penalized reports whether key is in the rule's penalty box at now: until when, and which limit.
func (p *pluginContext) penalized(rs *ruleState, key []byte, limits int, now int64) (idx int, until int64, ok bool) {
	if rs.blocked == nil {
		return 0, 0, false
	}
	v, ok, err := p.records.Find(rs.blocked, key)
	if err != nil || !ok {
		return 0, 0, false
	}
	until, idx, ok = sharedstate.ParseBlock(v)
	if !ok || until <= now || idx >= limits {
		return 0, 0, false
	}
	return idx, until, true
}

// penalize puts key in the rule's penalty box until then (limit idx denied it).
func (p *pluginContext) penalize(rs *ruleState, key string, idx int, until int64) {
	rs.metrics.penalties.Increment(1)
	p.blockEd = sharedstate.BlockEditor{Now: abi.UnixNano(), Until: until, Limit: byte(idx)}
	_, _ = p.records.Update(rs.blocked, []byte(key), &p.blockEd)
}

// keepCharges moves the charges of an admitted request from the scratch space to its context.
func (h *httpContext) keepCharges() {
	s := &h.plugin.scratch
	h.chargeKeys = append(h.chargeKeys[:0], s.resp.keys...)
	h.charges = append(h.charges[:0], s.resp.charges...)
	off := 0
	for i := range h.charges {
		c := &h.charges[i]
		c.key = bytesString(h.chargeKeys[off : off+c.keyLen])
		off += c.keyLen
	}
}

// responseHeader returns the first value of the response header name (as proxy_get_header_map_value
// gives it), read into the plugin's scratch buffer: the value is valid until the next read, so the
// caller uses it at once. It allocates nothing once the buffer has grown.
func (p *pluginContext) responseHeader(name string) (string, bool) {
	v, st := abi.GetHeader(abi.ResponseHeaders, name, p.scratch.respHdr)
	p.scratch.respHdr = v
	if st != abi.StatusOK {
		return "", false
	}
	return bytesString(v), true
}

// responseHeaders reads the upstream's response headers for count_on: the first value of a header,
// as Envoy's proxy_get_header_map_value returns it (valid until the next read: a condition uses it
// at once).
type responseHeaders struct{ p *pluginContext }

// HeaderValue implements rules.HeaderSource.
func (r responseHeaders) HeaderValue(name string, i int) (string, bool) {
	if i > 0 {
		return "", false
	}
	return r.p.responseHeader(name)
}

// chargeCounted decides the charges of an admitted request from its response, and reports whether
// the response must wait for the service (a global charge went out).
func (h *httpContext) chargeCounted() (paused bool) {
	if len(h.charges) == 0 {
		return false
	}
	status := 0
	if v, ok := h.plugin.responseHeader(":status"); ok {
		status, _ = strconv.Atoi(v)
	}
	hs := responseHeaders{h.plugin}
	h.plugin.scratch.globals = h.plugin.scratch.globals[:0] // the global charges, sent together (chargeGlobal)
	for i := range h.charges {
		c := &h.charges[i]
		if c.rs.rule.CountOn.Counts(status, hs) {
			h.chargeOne(c)
		}
	}
	h.charges = h.charges[:0]
	return h.chargeGlobal(abi.UnixNano())
}

// chargeUnanswered charges, at the end of a stream that got no response headers, the rules that
// count unanswered requests.
func (h *httpContext) chargeUnanswered() {
	h.plugin.scratch.globals = h.plugin.scratch.globals[:0]
	for i := range h.charges {
		if c := &h.charges[i]; c.rs.rule.CountOn.CountUnanswered {
			c.rs.metrics.unanswered.Increment(1)
			h.chargeOne(c)
		}
	}
	h.charges = h.charges[:0]
	h.chargeGlobal(abi.UnixNano())
}

// chargeOne charges one counted response: in shared data for a local rule; a global one is added to
// the scratch list of global items, which chargeGlobal sends to the service in one call once every
// charge is decided.
func (h *httpContext) chargeOne(c *charge) {
	p, rs := h.plugin, c.rs
	rs.metrics.counted.Increment(1)
	set := &rs.rule.LimitSets()[c.set]
	if rs.rule.Scope != rules.ScopeLocal {
		p.scratch.globals = append(p.scratch.globals, globalItem{rs: rs, spec: set.Limits, key: c.key, cost: c.cost})
		return
	}
	now := abi.UnixNano()
	out, err := p.limiter.Take(rs.tables[c.set], []byte(c.key), now, c.cost)
	if err != nil {
		if !errors.Is(err, sharedstate.ErrContention) {
			proxywasm.LogWarnf("meshlimit: rule %s: charging a counted response: %v", rs.rule.Name, err)
		}
		return
	}
	specs := rs.placed(out.Placement, set.Limits)
	p.nearLimit(rs, out.Decisions, specs)
	for j := range out.Decisions {
		d := &out.Decisions[j]
		if !d.Allowed || d.Remaining < c.cost {
			until := now + int64(d.RetryAfter)
			if pen := rs.rule.CountOn.Penalty; pen > 0 {
				until = now + int64(pen)
			}
			if until > now && j < len(set.Limits) {
				p.penalize(rs, c.key, j, until)
			}
			break
		}
	}
}

// nearLimit counts a rule's decision that left some limit with less than a tenth of its quota.
func (p *pluginContext) nearLimit(rs *ruleState, ds []algorithms.Decision, specs []rules.LimitSpec) {
	for j := range ds {
		if ds[j].Allowed && j < len(specs) && ds[j].Remaining*10 < specs[j].Limit.Quota {
			rs.metrics.nearLimit.Increment(1)
			return
		}
	}
}

// nearLimitWire is nearLimit for the service's decisions of one global item.
func (p *pluginContext) nearLimitWire(rs *ruleState, ds []wire.Decision, specs []rules.LimitSpec) {
	for j := range ds {
		if ds[j].Allowed && !ds[j].Skipped && j < len(specs) && ds[j].Remaining*10 < specs[j].Limit.Quota {
			rs.metrics.nearLimit.Increment(1)
			return
		}
	}
}

// chargeGlobal sends a counted response's global charges (the scratch list of global items) to the
// service in one call, and reports whether it pauses the response until the answer (bounded by
// global.timeout): a denied charge puts its key in the penalty box before the client sees the
// response. Without the service (breaker open, dispatch failed) the charges are lost and the
// response goes on: the rules' next counted response is charged again. One call per response: its
// answer, bound to h, is the only one h waits for (a second call would leave h in g.waiting once the
// first answer resumed it). Nor is a charge sent while a check of the stream is still out (an
// upstream that answers before the request body's call is answered): h.globals and h.deadline are
// that call's.
func (h *httpContext) chargeGlobal(now int64) bool {
	p, g := h.plugin, h.plugin.global
	if len(p.scratch.globals) == 0 || h.deadline != 0 {
		return false
	}
	if !g.breaker.allow(now) {
		g.metrics.shortCircuited.Increment(1)
		return false
	}
	h.globals = append(h.globals[:0], p.scratch.globals...) // the answer's items (their keys in h.chargeKeys)
	g.body = appendCheckBody(g.body[:0], p.name, h.globals)
	if _, err := proxywasm.DispatchHttpCall(g.cfg.Cluster, g.headers, g.body, nil, g.timeout, h.onChargeAnswer); err != nil {
		g.metrics.failures.Increment(1)
		if g.breaker.failure(now) {
			g.metrics.breakerOpened.Increment(1)
		}
		return false
	}
	g.metrics.calls.Increment(1)
	h.calls++ // onChargeAnswer is bound to h: h is not recycled until it has run
	h.charging = true
	h.deadline = now + int64(g.cfg.Timeout+deadlineSlack)
	g.waiting = append(g.waiting, h)
	return true
}

// onChargeAnswer is the callback of a global charge: a denial puts the key in the penalty box; the
// response is resumed in every case.
func (h *httpContext) onChargeAnswer(numHeaders, bodySize, _ int) {
	p, g := h.plugin, h.plugin.global
	h.calls--
	if h.deadline == 0 {
		g.metrics.lateAnswers.Increment(1)
		return
	}
	g.unwait(h)
	defer h.resumeResponse()
	defer p.recoverPanic("the service's answer to a charge")
	now := abi.UnixNano()
	ds, err := readCheckResponse(numHeaders, bodySize, descriptorCount(h.globals))
	if err != nil {
		g.metrics.failures.Increment(1)
		if g.breaker.failure(now) {
			g.metrics.breakerOpened.Increment(1)
		}
		return
	}
	g.breaker.success()
	j := 0
	for i := range h.globals {
		it := &h.globals[i]
		n := len(it.spec)
		p.chargeAnswered(it, ds[j:j+n], now) // readCheckResponse checked the count
		j += n
	}
}

// chargeAnswered applies the service's decisions of one global charge: the first limit the charge
// exhausted (denied, or left unable to admit the same cost) puts the key in the penalty box.
func (p *pluginContext) chargeAnswered(it *globalItem, ds []wire.Decision, now int64) {
	p.nearLimitWire(it.rs, ds, it.spec)
	pen := it.rs.rule.CountOn.Penalty
	for k := range ds {
		d := &ds[k]
		if d.Skipped || (d.Allowed && d.Remaining >= it.cost) {
			continue
		}
		until := now + d.RetryAfterMs*int64(time.Millisecond)
		if pen > 0 {
			until = now + int64(pen)
		}
		if until > now {
			p.penalize(it.rs, it.key, k, until)
		}
		return
	}
}

// resumeResponse continues a response paused for a global charge.
func (h *httpContext) resumeResponse() {
	h.charging = false
	if err := proxywasm.ResumeHttpResponse(); err != nil {
		proxywasm.LogErrorf("meshlimit: resuming the response: %v", err)
	}
}

// chargeExpired handles the deadline of a global charge (see expireCalls): the response goes on
// without the answer. It reports false for a request that was not charging.
func (h *httpContext) chargeExpired() bool {
	if !h.charging {
		return false
	}
	h.resumeResponse()
	return true
}

// respondAction is OnHttpResponseHeaders' action after the counted charges.
func respondAction(paused bool) types.Action {
	if paused {
		return types.ActionPause
	}
	return types.ActionContinue
}
