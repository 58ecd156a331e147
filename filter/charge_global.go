package filter

import (
	"github.com/meshlimit/meshlimit/rules"
	"github.com/meshlimit/meshlimit/wire"
)

// A global counted rule charges each attempt when it arrives, tentatively: its limits go into the
// request's check like any global rule's, so the service admits attempts only while they fit its
// counter with the attempts counted and those in flight, and parallel guesses reach the upstream
// no more often than sequential ones. The answer's admission is recorded in the request's charge
// (admitted); the response then decides it:
//   - a response that matches count_on keeps it; when the admission left a limit unable to admit
//     the same cost again, the key goes into the penalty box until now+penalty (without a penalty,
//     the service's counter denies the next attempts by itself);
//   - one that does not match, a stream that ends unanswered without count_unanswered, or a request
//     the filter denies gives it back through the service (giveback_global.go: an undo, exact for
//     every algorithm), counted in given_back.
// A charge the service never made (the check failed: fallback or failure_mode) is charged on a
// counted response as before: one call, the response waiting for its answer (chargeGlobal). A
// stream that ends while its check is out leaves the charge as the service decides it (counted
// when admitted, whatever count_unanswered says: the filter cannot know what to give back). Only
// the check that carries a rule's item carries its charge (checked): a request's body call, which
// carries the rules that read the body, carries none. Giving back a charge gives back nothing else
// (giveBackCounted): the other admissions of a request that waits for its body stage are the
// request's, given back only if that stage denies it.

// admitted records, from the answer to a request's check, the charges the service made for its
// global counted rules. sent is when the check was sent: the charge is no older.
func (c *charger) admitted(h *httpContext, items []globalItem, decisions []wire.Decision, sent int64) {
	for it, ds := range decidedItems(items, decisions) {
		if it.rs.rule.CountOn == nil {
			continue
		}
		ch := h.charges.of(it.rs)
		if ch == nil {
			continue
		}
		charged := chargedMask(it.spec, ds) // a counted rule has no concurrency limit
		ch.charged |= charged
		ch.taken = takenAt(ds, charged) // only this check carries the charge (checked)
		for k := 0; k < len(ds) && ch.exhausted == 0; k++ {
			if charged&(1<<k) != 0 && ds[k].Remaining < it.cost {
				ch.exhausted = k + 1
			}
		}
		ch.at, ch.inCheck = sent, false
	}
}

// of returns the stream's charge of rule rs, or nil.
func (c *chargeStream) of(rs *ruleState) *charge {
	for i := range c.list {
		if c.list[i].rs == rs {
			return &c.list[i]
		}
	}
	return nil
}

// countedGlobal decides a counted response of a global rule: the service's tentative charge is
// kept, and puts the key into the penalty box when it exhausted a limit; a charge the service never
// made is sent now (chargeGlobal).
func (c *charger) countedGlobal(ch *charge, set *rules.LimitSet) {
	if ch.inCheck { // the stream ended before its check's answer: the service decided the charge
		return
	}
	if ch.charged == 0 {
		c.d.globals = append(c.d.globals, globalItem{rs: ch.rs, spec: set.Limits, key: ch.key, cost: ch.cost})
		return
	}
	if pen := ch.rs.rule.CountOn.Penalty; ch.exhausted > 0 && pen > 0 {
		c.penalize(ch.rs, ch.key, ch.exhausted-1, c.host.now()+int64(pen))
	}
}

// giveBackGlobal sends the service the give-backs of the stream's global charges (giveBack
// recorded them), and of nothing else the stream holds.
func (c *charger) giveBackGlobal(h *httpContext) {
	if c.g != nil && len(h.taken.global) > 0 {
		c.g.settle.giveBackCounted(h, c.host.now())
	}
}

// checked marks the global charges that the check of items carries as carried (dispatched), or,
// with sent false, as not charged by it after all (the call failed: the fallback or failure_mode
// decided). A charge whose rule is not among items (the stream's other check: the headers' or the
// body's) is left as it is.
func (c *charger) checked(h *httpContext, items []globalItem, sent bool) {
	for i := range items {
		if it := &items[i]; it.rs.rule.CountOn != nil {
			if ch := h.charges.of(it.rs); ch != nil && ch.charged == 0 {
				ch.inCheck = sent
			}
		}
	}
}
