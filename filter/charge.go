package filter

import (
	"errors"
	"strconv"
	"time"

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
	key    string // the rule's key value (in the stream's keys: valid while the stream lives)
	keyLen int
	cost   int64
}

// chargeScratch collects the charges of the request being decided; their keys are ranges of keys
// until keep.
type chargeScratch struct {
	list []charge
	keys []byte
}

func (c *chargeScratch) reset() { c.list, c.keys = c.list[:0], c.keys[:0] }

// chargeStream is what an admitted request keeps for its response: its charges (their keys'
// bytes in keys), and whether the response waits for the service's answer to them.
type chargeStream struct {
	list    []charge
	keys    []byte
	waiting bool
}

// reset clears c for another stream, keeping its arrays.
func (c *chargeStream) reset() {
	list := c.list
	clear(list[:cap(list)]) // no charge keeps the old configuration's rules alive
	*c = chargeStream{list: list[:0], keys: c.keys[:0]}
}

// charger charges the counted rules (count_on) of the plugin's streams from their responses.
type charger struct {
	*env
	g     *globalClient // nil without a global service
	cache *overLimitCache
}

// check is decide for a counted rule: it checks the key without charging it and reports whether the
// request is denied. An admitted request's charge is kept for its response.
func (c *charger) check(rs *ruleState, set *rules.LimitSet, key []byte, cost, now int64) (denied bool) {
	d, r := &c.d, rs.rule
	enforced := c.cfg.Enforce && !r.Shadow && r.EnforcedFor(key)
	if idx, until, ok := c.penalized(rs, key, len(set.Limits), now); ok {
		rs.metrics.penaltyDenied.inc(1)
		if enforced {
			d.outcomes = append(d.outcomes, rules.Outcome{Limit: &set.Limits[idx], Decision: cachedDenial(&set.Limits[idx], until-now), Period: set.Limits[idx].PeriodAt(now),
				Partition: c.cfg.Response.Partition(r, key), Abnormal: true})
		}
		return d.count(rs, false, enforced)
	}
	allowed := true
	if r.Scope == rules.ScopeLocal {
		out, err := c.limiter.Check(rs.tables[set.Index], key, now, cost)
		if err != nil {
			logf(c.host, logWarn, "meshlimit: rule %s: %v", r.Name, err)
			return r.FailureMode == rules.FailDeny && enforced && d.count(rs, false, enforced)
		}
		allowed = out.Allowed
		if !allowed && enforced {
			pk := c.cfg.Response.Partition(r, key)
			for j := range set.Limits {
				d.outcome(&set.Limits[j], out.Decisions[j], pk, now)
			}
		}
	}
	if c.debugging() {
		logf(c.host, logDebug, "meshlimit: rule %s key %q: checked (charged on a counted response): allowed=%t", r.Name, key, allowed)
	}
	if d.count(rs, allowed, enforced) {
		return true
	}
	d.charges.keys = append(d.charges.keys, key...) // keep gives the key its string
	d.charges.list = append(d.charges.list, charge{rs: rs, set: set.Index, keyLen: len(key), cost: cost})
	return false
}

// penalized reports whether key is in the rule's penalty box at now: until when, and which limit.
func (c *charger) penalized(rs *ruleState, key []byte, limits int, now int64) (idx int, until int64, ok bool) {
	if rs.blocked == nil {
		return 0, 0, false
	}
	return c.cache.find(rs.blocked, key, limits, now)
}

// penalize puts key in the rule's penalty box until then (limit idx denied it).
func (c *charger) penalize(rs *ruleState, key string, idx int, until int64) {
	rs.metrics.penalties.inc(1)
	c.cache.put(rs.blocked, []byte(key), idx, until)
}

// keep moves the charges of an admitted request from the decision to its stream.
func (c *charger) keep(h *httpContext) {
	ds, hs := &c.d.charges, &h.charges
	hs.keys = append(hs.keys[:0], ds.keys...)
	hs.list = append(hs.list[:0], ds.list...)
	off := 0
	for i := range hs.list {
		ch := &hs.list[i]
		ch.key = bytesString(hs.keys[off : off+ch.keyLen])
		off += ch.keyLen
	}
}

// respond decides the charges of an admitted request from its response, and reports whether the
// response must wait for the service (a global charge went out). A stream without charges decides
// nothing: the check is inlined at the caller.
func (c *charger) respond(h *httpContext) (paused bool) {
	return len(h.charges.list) > 0 && c.charge(h)
}

func (c *charger) charge(h *httpContext) (paused bool) {
	status := 0
	if v, ok := c.resp.header(":status"); ok {
		status, _ = strconv.Atoi(v)
	}
	c.d.globals = c.d.globals[:0] // the global charges, sent together (chargeGlobal)
	for i := range h.charges.list {
		ch := &h.charges.list[i]
		if ch.rs.rule.CountOn.Counts(status, &c.resp) {
			c.chargeOne(ch)
		}
	}
	h.charges.list = h.charges.list[:0]
	return c.chargeGlobal(h, c.host.now(), true)
}

// endStream charges, at the end of a stream that got no response headers, the rules that count
// unanswered requests. A global charge goes out, but nothing waits for its answer: the stream is
// gone.
func (c *charger) endStream(h *httpContext) {
	if len(h.charges.list) == 0 {
		return
	}
	c.d.globals = c.d.globals[:0]
	for i := range h.charges.list {
		if ch := &h.charges.list[i]; ch.rs.rule.CountOn.CountUnanswered {
			ch.rs.metrics.unanswered.inc(1)
			c.chargeOne(ch)
		}
	}
	h.charges.list = h.charges.list[:0]
	c.chargeGlobal(h, c.host.now(), false)
}

// chargeOne charges one counted response: in shared data for a local rule; a global one is added to
// the decision's global items, which chargeGlobal sends to the service in one call once every
// charge is decided.
func (c *charger) chargeOne(ch *charge) {
	rs := ch.rs
	rs.metrics.counted.inc(1)
	set := &rs.rule.LimitSets()[ch.set]
	if rs.rule.Scope != rules.ScopeLocal {
		c.d.globals = append(c.d.globals, globalItem{rs: rs, spec: set.Limits, key: ch.key, cost: ch.cost})
		return
	}
	now := c.host.now()
	out, err := c.limiter.Take(rs.tables[ch.set], []byte(ch.key), now, ch.cost)
	if err != nil {
		if !errors.Is(err, sharedstate.ErrContention) {
			logf(c.host, logWarn, "meshlimit: rule %s: charging a counted response: %v", rs.rule.Name, err)
		}
		return
	}
	specs := rs.placed(out.Placement, set.Limits)
	rs.nearLimit(out.Decisions, specs)
	for j := range out.Decisions {
		d := &out.Decisions[j]
		if !d.Allowed || d.Remaining < ch.cost {
			until := now + int64(d.RetryAfter)
			if pen := rs.rule.CountOn.Penalty; pen > 0 {
				until = now + int64(pen)
			}
			if until > now && j < len(set.Limits) {
				c.penalize(rs, ch.key, j, until)
			}
			break
		}
	}
}

// chargeGlobal sends a counted response's global charges (the decision's global items) to the
// service in one call, and reports whether it pauses the response until the answer (bounded by
// global.timeout): a denied charge puts its key in the penalty box before the client sees the
// response. Without the service (breaker open, dispatch failed) the charges are lost and the
// response goes on: the rules' next counted response is charged again. One call per response: its
// answer, bound to h, is the only one h waits for (a second call would leave h waiting once the
// first answer resumed it). Nor is a charge sent while a check of the stream is still out (an
// upstream that answers before the request body's call is answered): h.call is that call's. At
// the end of a stream (await false), the call goes out but nothing waits for it.
func (c *charger) chargeGlobal(h *httpContext, now int64, await bool) bool {
	g, d := c.g, &c.d
	if len(d.globals) == 0 || h.call.deadline != 0 {
		return false
	}
	if !g.breaker.allow(now) {
		g.metrics.shortCircuited.inc(1)
		return false
	}
	h.call.items = append(h.call.items[:0], d.globals...) // the answer's items (their keys in h.charges.keys)
	g.body = appendCheckBody(g.body[:0], g.name, h.call.items)
	if err := c.host.dispatch(g.cfg.Cluster, g.trace.callHeaders(c.host, g.headers), g.body, g.timeout, func(numHeaders, bodySize, _ int) {
		c.onAnswer(h, numHeaders, bodySize)
	}); err != nil {
		g.failure(now)
		return false
	}
	g.metrics.calls.inc(1)
	h.calls++ // onAnswer is bound to h: h is not recycled until it has run
	if !await {
		return false
	}
	h.charges.waiting = true
	g.wait(h, now)
	return true
}

// onAnswer is the callback of a global charge: a denial puts the key in the penalty box; the
// response is resumed in every case.
func (c *charger) onAnswer(h *httpContext, numHeaders, bodySize int) {
	g := c.g
	h.calls--
	if h.call.deadline == 0 {
		g.metrics.lateAnswers.inc(1)
		return
	}
	g.unwait(h)
	defer c.resume(h)
	defer c.panics.recoverPanic("the service's answer to a charge")
	now := c.host.now()
	ds, err := g.readCheck(numHeaders, bodySize, descriptorCount(h.call.items))
	if err != nil {
		g.failure(now)
		return
	}
	g.breaker.success()
	j := 0
	for i := range h.call.items {
		it := &h.call.items[i]
		n := len(it.spec)
		c.answered(it, ds[j:j+n], now) // readCheck checked the count
		j += n
	}
}

// answered applies the service's decisions of one global charge: the first limit the charge
// exhausted (denied, or left unable to admit the same cost) puts the key in the penalty box.
func (c *charger) answered(it *globalItem, ds []wire.Decision, now int64) {
	it.rs.nearLimitWire(ds, it.spec)
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
			c.penalize(it.rs, it.key, k, until)
		}
		return
	}
}

// resume continues a response paused for a global charge.
func (c *charger) resume(h *httpContext) {
	h.charges.waiting = false
	c.host.resume(responsePart)
}

// expired handles the deadline of a global charge (see globalClient.tick): the response goes on
// without the answer. It reports false for a stream that was not waiting for a charge.
func (c *charger) expired(h *httpContext) bool {
	if !h.charges.waiting {
		return false
	}
	c.resume(h)
	return true
}
