package filter

import (
	"errors"
	"strconv"
	"time"

	"github.com/meshlimit/meshlimit/rules"
	"github.com/meshlimit/meshlimit/sharedstate"
	"github.com/meshlimit/meshlimit/wire"
)

// Response-conditioned counting (rules[].count_on). A request is denied while its key is in the
// penalty box (the rule's blocked records, owner-checked like every record: the over-limit cache of
// a global rule). A local rule keeps two tables per limit set: its attempts table, charged when an
// attempt arrives, tentatively (sharedstate.Limiter.Take), so that the attempts in flight hold the
// key's quota and parallel guesses reach the upstream no more often than sequential ones; and its
// counted table, charged by the counted responses alone, which decides the penalty as if the
// attempts had come one after another. The response headers decide the tentative charge:
//   - a response that matches count_on keeps it and charges the counted table; a charge there
//     that is denied, or that leaves a limit unable to admit the same cost again, puts the key in
//     the penalty box until now+penalty (without a penalty: until the limit's Retry-After);
//   - a response that does not match gives it back (sharedstate.Settler.Undo, exact for every
//     algorithm whatever other VMs took since);
//   - a stream that ends without response headers (the client left first) is a counted response
//     when count_unanswered is true (the default: leaving early never avoids the charge), else it
//     gives its charge back;
//   - a request the filter denies (a later rule, the service, a shedder) gives it back: the local
//     reply is never charged.
// A global rule charges each attempt in the request's check, tentatively, and the response decides
// the charge the same way, giving it back through the service (charge_global.go). The key is the one computed from the request when it arrived: a
// response cannot charge another key.

// charge is one counted rule's pending charge for an admitted request.
type charge struct {
	rs     *ruleState
	set    int    // the index of the limit set (an override's, or the rule's own)
	key    string // the rule's key value (in the stream's keys: valid while the stream lives)
	keyLen int
	cost   int64
	// A local rule's tentative charge: the placement of its take and when it was taken (a global
	// rule's: when its check was sent).
	placement sharedstate.Placement
	at        int64
	// A global rule's tentative charge, made by the service in the request's check (admitted):
	// the limits it charged (bit k: spec[k]), and 1 + the first limit it left unable to admit the
	// same cost again (0: none), which a counted response puts into the penalty box.
	charged   uint64
	exhausted int
	taken     takenTimes // the store's time of each charged limit's decision
	// inCheck: the request's check carried the charge and its answer has not been read; if the
	// stream ends first, the service decided the charge and the filter leaves it so.
	inCheck bool
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
	undo  *sharedstate.Settler // gives back tentative charges; created on first use
}

// check is decide for a counted rule: it charges a local rule's key tentatively (a global rule's
// is only checked against its penalty box) and reports whether the request is denied. An admitted
// request's charge is kept for its response.
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
	if r.Scope != rules.ScopeLocal { // charged by the service in the request's check (admitted)
		c.d.globals = append(c.d.globals, globalItem{rs: rs, spec: set.Limits, key: string(key), cost: cost})
		d.charges.keys = append(d.charges.keys, key...)
		d.charges.list = append(d.charges.list, charge{rs: rs, set: set.Index, keyLen: len(key), cost: cost})
		return false
	}
	out, err := c.limiter.Take(rs.attempts[set.Index], key, now, cost)
	if err != nil {
		logf(c.host, logWarn, "meshlimit: rule %s: %v", r.Name, err)
		return r.FailureMode == rules.FailDeny && enforced && d.count(rs, false, enforced)
	}
	allowed, placement := out.Allowed, out.Placement
	if !allowed && enforced {
		pk := c.cfg.Response.PartitionIn(r, key, placement == sharedstate.Overflow)
		for j := range set.Limits {
			d.outcome(&set.Limits[j], out.Decisions[j], pk, now)
		}
	}
	if c.debugging() {
		logf(c.host, logDebug, "meshlimit: rule %s key %q: charged tentatively (kept on a counted response): allowed=%t", r.Name, key, allowed)
	}
	if d.count(rs, allowed, enforced) {
		return true
	}
	d.charges.keys = append(d.charges.keys, key...) // keep gives the key its string
	d.charges.list = append(d.charges.list, charge{rs: rs, set: set.Index, keyLen: len(key), cost: cost, placement: placement, at: now})
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
	ds.reset() // the stream's now: a denial later in this callback gives them back from there
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
		} else {
			c.giveBack(h, ch, ch.key)
		}
	}
	h.charges.list = h.charges.list[:0]
	c.giveBackGlobal(h)
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
		} else {
			c.giveBack(h, ch, ch.key)
		}
	}
	h.charges.list = h.charges.list[:0]
	c.giveBackGlobal(h)
	c.chargeGlobal(h, c.host.now(), false)
}

// chargeOne charges one counted response: a local rule keeps its tentative charge (its attempts
// table) and charges its counted table, where a charge that is denied or leaves a limit unable to
// admit the same cost again puts the key into the penalty box; a global one is added to the
// decision's global items, which chargeGlobal sends to the service in one call once every charge
// is decided.
func (c *charger) chargeOne(ch *charge) {
	rs := ch.rs
	rs.metrics.counted.inc(1)
	set := &rs.rule.LimitSets()[ch.set]
	if rs.rule.Scope != rules.ScopeLocal {
		c.countedGlobal(ch, set)
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

// giveBack undoes a rule's tentative charge (an answer it does not count, a request the filter
// denied): a local rule's at once, a global rule's (if the service made it) with the stream's
// give-backs, which giveBackGlobal (or deny) sends the service.
func (c *charger) giveBack(h *httpContext, ch *charge, key string) {
	rs := ch.rs
	if rs.rule.Scope != rules.ScopeLocal {
		if ch.charged != 0 {
			spec := rs.rule.LimitSets()[ch.set].Limits
			h.taken.global = append(h.taken.global, reservation{rs: rs, key: key, at: ch.at, reserved: ch.cost, spec: spec, charged: ch.charged, taken: ch.taken})
		}
		return
	}
	if c.undo == nil {
		c.undo = sharedstate.NewSettler(c.limiter.Updater())
	}
	rs.metrics.givenBack.inc(1)
	_, err := c.undo.Undo(rs.attempts[ch.set], []byte(key), ch.placement, c.host.now(), ch.at, ch.cost)
	if err != nil && !errors.Is(err, sharedstate.ErrContention) {
		logf(c.host, logWarn, "meshlimit: rule %s: giving back an uncounted attempt: %v", rs.rule.Name, err)
	}
}

// drop gives back the tentative charges of a request the filter denies: those still in the
// decision (denied while its rules are decided) and those its stream kept.
func (c *charger) drop(h *httpContext) {
	ds := &c.d.charges
	off := 0
	for i := range ds.list {
		ch := &ds.list[i]
		c.giveBack(h, ch, bytesString(ds.keys[off:off+ch.keyLen]))
		off += ch.keyLen
	}
	ds.reset()
	for i := range h.charges.list {
		c.giveBack(h, &h.charges.list[i], h.charges.list[i].key)
	}
	h.charges.list = h.charges.list[:0]
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
	boundAnswer(h.call.items, ds, now)
	for it, ids := range decidedItems(h.call.items, ds) { // readCheck checked the count
		c.answered(it, ids, now)
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
		until := now + min(d.RetryAfterMs*int64(time.Millisecond), int64(it.spec[k].LongestWait(now, it.rs.rule.Settle() != nil))) // to the ns
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
