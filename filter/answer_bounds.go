package filter

import (
	"time"

	"github.com/meshlimit/meshlimit/rules"
	"github.com/meshlimit/meshlimit/wire"
)

// The decision service's answers are trusted for what they decide (allowed or not, remaining), but
// what they say about time is bounded by what the filter knows of the limit: a service that is
// wrong, old or hostile must not make a proxy tell clients, or its over-limit cache hold, a wait
// longer than the limit can ever need (review 23: 400 days for a period that ends in 60 s, a 366-day
// denial cached for a 10/m rule), nor a calendar quota render t=0.

// boundAnswer bounds, in place, the decisions ds of items (one per limit, in order; readCheck
// checked the count) at now: see boundDecision.
func boundAnswer(items []globalItem, ds []wire.Decision, now int64) {
	for it, ids := range decidedItems(items, ds) {
		boundDecisions(it.spec, ids, it.rs.rule.Settle() != nil, now)
	}
}

// boundDecisions bounds, in place, the decisions ds of specs (one each), limits of a rule that
// settles or not: see boundDecision.
func boundDecisions(specs []rules.LimitSpec, ds []wire.Decision, settles bool, now int64) {
	for k := range ds {
		boundDecision(&specs[k], &ds[k], settles, now)
	}
}

// boundDecision caps a decision's reset, retry, delay and effective window at the longest wait of
// its limit at now (rules.LimitSpec.LongestWait), in whole milliseconds rounded up, and gives a
// calendar window's decision without a usable effective window the one the filter knows: the time
// until its period ends (a fixed window's effective window is its end, used or not). A retry of -1
// (never) is kept. A concurrency limit has no time to bound: a permit comes back when a request
// ends, so its denial's retry is never (-1), as the service sends it (rules.ConcurrencyDecision):
// it is not rendered as a Retry-After nor held in the over-limit cache.
func boundDecision(spec *rules.LimitSpec, d *wire.Decision, settles bool, now int64) {
	w := spec.LongestWait(now, settles)
	if w <= 0 {
		if !d.Allowed {
			d.RetryAfterMs = -1
		}
		return
	}
	ms := int64((w + time.Millisecond - 1) / time.Millisecond)
	d.ResetMs, d.DelayMs = min(d.ResetMs, ms), min(d.DelayMs, ms)
	d.RetryAfterMs, d.EffectiveMs = min(d.RetryAfterMs, ms), min(d.EffectiveMs, ms)
	if spec.Limit.Calendar.Unit != 0 && d.EffectiveMs <= 0 {
		d.EffectiveMs = ms
	}
}
