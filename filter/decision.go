package filter

import (
	"slices"

	"github.com/meshlimit/meshlimit/algorithms"
	"github.com/meshlimit/meshlimit/rules"
	"github.com/meshlimit/meshlimit/sharedstate"
)

// decision is the request being decided: its view of the host's request, the key of the rule at
// hand, the outcomes of the enforced limits (for the quota fields or the denial), and what the
// features collect for the stream (permits taken, reservations, counted charges). One serves a
// plugin: a VM runs one callback at a time and the local path never pauses; a request that waits
// for the service keeps what its answer needs in its stream (callStream) while others reuse this.
type decision struct {
	host     host
	req      hostRequest
	key      []byte
	outcomes []rules.Outcome
	delay    int64           // the longest shaping delay (ns) an enforced leaky-bucket limit asked for
	globals  []globalItem    // the global rules that apply to the request
	deciding int             // the index of the rule being decided, or -1: whose failure_mode a panic applies
	selected rules.Selection // the rules the request may match (rules.Config.Select)
	denier   *ruleState      // the enforced rule that denied the request, or nil

	acquired []heldPermit  // the permits taken for the request (permits)
	settle   settleScratch // its reservations (settler)
	charges  chargeScratch // its counted rules' charges (charger)
	msgs     msgScratch    // its message limit (messageLimiter)
	taken    takenScratch  // its admitted local takes, given back if it is denied (giveBack)
}

// reset readies d for a new request; eos says that its headers end it (no body will come).
func (d *decision) reset(eos bool) {
	d.req.reset()
	d.outcomes, d.globals, d.acquired = d.outcomes[:0], d.globals[:0], d.acquired[:0]
	d.delay, d.deciding, d.denier = 0, -1, nil
	d.settle.reset(eos)
	d.charges.reset()
	d.msgs.reset()
	d.taken.reset(0)
}

// restore puts back what a paused request had decided before its call (c), for the callback that
// goes on deciding it.
func (d *decision) restore(c *callStream) {
	d.req.reset() // the request view may hold another stream's values
	d.outcomes = append(d.outcomes[:0], c.outcomes...)
	d.delay = c.delay
}

// outcome appends the outcome of an enforced limit, decided at now, for the response (the quota
// fields, or the denial's): a calendar window's carries the length of the period now falls in.
func (d *decision) outcome(spec *rules.LimitSpec, dec algorithms.Decision, pk rules.PartitionKey, now int64) {
	d.outcomes = append(d.outcomes, rules.Outcome{Limit: spec, Decision: dec, Partition: pk, Period: spec.PeriodAt(now)})
}

// count records a rule's decision in its metrics (and tags a shadow denial) and reports whether it
// denies the request.
func (d *decision) count(rs *ruleState, allowed, enforced bool) (denied bool) {
	switch {
	case allowed:
		rs.metrics.allowed.inc(1)
	case enforced:
		rs.metrics.limited.inc(1)
		d.denier = rs
		return true
	default:
		rs.metrics.shadowLimited.inc(1)
		if rs.rule.ShadowHeader != "" {
			d.host.addHeader(requestPart, rs.rule.ShadowHeader, bytesOf(rs.rule.Name))
		}
	}
	return false
}

// decideRules decides the rules the request may match, in order, up to the first that denies it,
// and reports whether one did. The others (rules.Config.Select) cannot match it: they cost nothing.
// planned decides each with the local plan's decidePlanned (localHeaders), else with decide.
func (p *pluginContext) decideRules(now int64, planned bool) (denied bool) {
	d := &p.d
	p.cfg.Select(&d.req, &d.selected)
	for i := d.selected.Next(0); i >= 0; i = d.selected.Next(i + 1) {
		d.deciding = i
		if planned {
			denied = p.decidePlanned(&p.rules[i], now)
		} else {
			denied = p.decide(&p.rules[i], now)
		}
		if denied {
			break
		}
	}
	d.deciding = -1
	return denied
}

// decide applies one rule to the current request and reports whether it denies it (enforced): it
// matches the rule, builds its key, picks its limits and cost, and hands it to the feature the rule
// is of. The outcomes of enforced rules are appended for the response headers.
func (p *pluginContext) decide(rs *ruleState, now int64) (denied bool) {
	r := rs.rule
	key, set, applies, denied := p.keyed(rs)
	if !applies {
		return denied
	}
	if r.Messages() != nil { // the stream's messages are charged, not the request
		p.msgs.adopt(rs, set, key, p.cfg.Enforce && !r.Shadow && (r.EnforcePercent == 100 || r.EnforcedFor(key)))
		return false
	}
	if r.ReservesFromBody() && p.body.deferToBody(rs, set, key) { // a reservation read from the body
		return false
	}
	cost := p.cost(r)
	if r.CountOn != nil {
		return p.charges.check(rs, set, key, cost, now)
	}
	if r.Scope != rules.ScopeLocal && p.global.queue(rs, set, key, cost, now) {
		return false
	}
	enforced := p.cfg.Enforce && !r.Shadow && (r.EnforcePercent == 100 || r.EnforcedFor(key))
	if rs.permits != nil {
		return p.permits.acquire(rs, key, now, enforced)
	}
	return p.decideLocal(rs, set, key, cost, now, enforced)
}

// keyed matches rs against the current request and builds its key and its limit set: applies is
// false when the rule leaves the request alone (no match, a key part missing with missing_key
// skip, an unlimited key) or decided it already (a conflicting key, counted: denied says whether
// it denies).
func (p *pluginContext) keyed(rs *ruleState) (key []byte, set *rules.LimitSet, applies, denied bool) {
	d, r := &p.d, rs.rule
	if !r.Matches(&d.req) {
		return nil, nil, false, false
	}
	testPanic(p.host, panicRequestHeaders)
	key, st := r.AppendKey(d.key[:0], &d.req)
	d.key = key
	switch st {
	case rules.KeySkip:
		return key, nil, false, false
	case rules.KeyConflict: // a key header or parameter repeated with different values is refused
		return key, nil, false, d.count(rs, false, p.cfg.Enforce && !r.Shadow)
	}
	set, unlimited := r.Limits(key)
	return key, set, !unlimited, false
}

// cost is the cost of the current request for rule r (a header it cannot read is logged at debug).
func (p *pluginContext) cost(r *rules.Rule) int64 {
	cost, err := r.Cost(&p.d.req)
	if err != nil && p.debugging() {
		logf(p.host, logDebug, "meshlimit: rule %s: %v; charging %d", r.Name, err, cost)
	}
	return cost
}

// decideLocal decides a rule's key against its shared-data table, records the outcome and reports
// whether the request is denied.
func (p *pluginContext) decideLocal(rs *ruleState, set *rules.LimitSet, key []byte, cost, now int64, enforced bool) (denied bool) {
	d, r := &p.d, rs.rule
	out, err := p.limiter.TakeBounded(rs.tables[set.Index], key, now, cost, r.CostBound(cost))
	if (out.Attempts > 1 || err != nil) && p.updated(rs, out.Attempts, err) != nil {
		return rs.failed(enforced)
	}
	specs := rs.placed(out.Placement, set.Limits)
	if p.debugging() {
		logf(p.host, logDebug, "meshlimit: rule %s key %q cost %d: allowed=%t (%d attempts)", r.Name, key, cost, out.Allowed, out.Attempts)
	}
	d.count(rs, out.Allowed, enforced)
	rs.nearLimit(out.Decisions, specs)
	p.settle.reserve(rs, set.Index, key, &out, out.Cost, now)
	if rs.givesBack {
		d.taken.add(rs, set.Index, key, &out, out.Cost)
	}
	if enforced {
		d.outcomesOf(specs, out.Decisions, p.cfg.Response.PartitionIn(r, key, out.Placement == sharedstate.Overflow), now, out.Allowed)
	}
	return enforced && !out.Allowed
}

// outcomesOf appends the outcomes of one decision of an enforced rule's limits (specs, decided ds)
// at now, all with partition key pk, in place (one growth check for them all), and keeps the
// longest shaping delay of an admitted request.
func (d *decision) outcomesOf(specs []rules.LimitSpec, ds []algorithms.Decision, pk rules.PartitionKey, now int64, allowed bool) {
	n := len(d.outcomes)
	d.outcomes = slices.Grow(d.outcomes, len(specs))[:n+len(specs)]
	added, ds := d.outcomes[n:], ds[:len(specs)]
	for j := range added {
		spec, o := &specs[j], &added[j] // by field: no composite to copy in
		o.Limit, o.Decision, o.Partition, o.Period, o.Abnormal, o.Cost = spec, ds[j], pk, spec.PeriodAt(now), false, 0
		if dl := int64(ds[j].Delay); allowed && dl > d.delay {
			d.delay = dl
		}
	}
}
