package service

import (
	"context"
	"slices"
	"time"

	"github.com/meshlimit/meshlimit/algorithms"
	"github.com/meshlimit/meshlimit/wire"
)

// outcome is the result of a check: one decision per descriptor, in request order.
type outcome struct {
	// allowed reports whether every descriptor allowed the request.
	allowed   bool
	decisions []descriptorDecision
}

// descriptorDecision is one descriptor's decision.
type descriptorDecision struct {
	algorithms.Decision
	// skipped reports that the descriptor was not evaluated (nor charged) because an earlier
	// one denied the request; only Limit is set.
	skipped bool
}

// limiter checks batches of descriptors against a Store: in order, each atomically, stopping
// at the first denial (see the package documentation), and records the metrics of each. It is
// safe for concurrent use.
type limiter struct {
	store   Store
	metrics *Metrics
}

// check decides descs at now (the zero Time: the store's clock), with the decisions appended
// to dst[:0]. It returns an error, and no outcome, if the store fails or ctx ends; descriptors
// decided before the failure stay charged. A permit descriptor (Descriptor.Permit set)
// acquires its permit; a denied check gives back the permits it acquired.
func (l *limiter) check(ctx context.Context, descs []wire.Descriptor, now time.Time, dst []descriptorDecision, bs *batchScratch) (outcome, error) {
	if _, ok := l.store.(BatchDecider); ok && len(descs) > 1 && !hasPermit(descs) {
		return l.checkBatch(ctx, descs, now, dst, bs)
	}
	o := outcome{allowed: true, decisions: slices.Grow(dst[:0], len(descs))[:len(descs)]}
	clear(o.decisions)
	acquired := false
	for i := range descs {
		d := &descs[i]
		if !o.allowed {
			o.decisions[i] = descriptorDecision{Decision: algorithms.Decision{Limit: d.Limit.Quota}, skipped: true}
			l.metrics.decision(d.Limit.Kind, outSkipped)
			continue
		}
		start := time.Now()
		var dec algorithms.Decision
		var err error
		if d.Permit != "" {
			dec, err = l.acquire(ctx, d, now)
			acquired = acquired || dec.Allowed
		} else {
			dec, err = l.store.Decide(ctx, Request{Key: d.Key, Limit: d.Limit, Cost: d.Cost, Now: now})
		}
		l.metrics.observe(time.Since(start))
		if err != nil {
			return outcome{}, err
		}
		o.decisions[i].Decision = dec
		if dec.Allowed {
			l.metrics.decision(d.Limit.Kind, outAllowed)
		} else {
			l.metrics.decision(d.Limit.Kind, outDenied)
			o.allowed = false
		}
	}
	if acquired && !o.allowed {
		l.releaseAcquired(ctx, descs, &o, now)
	}
	l.metrics.check(o.allowed)
	return o, nil
}

// batchScratch is what a batched check reuses from the last: its store requests and decisions.
type batchScratch struct {
	reqs    []Request
	decided []algorithms.Decision
}

// hasPermit reports whether a descriptor acquires a permit (decided one by one: a denied check
// gives back the permits it acquired).
func hasPermit(descs []wire.Descriptor) bool {
	for i := range descs {
		if descs[i].Permit != "" {
			return true
		}
	}
	return false
}

// checkBatch is check on a BatchDecider for descriptors without permits: one store call (one
// round trip on Redis) decides them in order up to the first denial, as check's loop does.
func (l *limiter) checkBatch(ctx context.Context, descs []wire.Descriptor, now time.Time, dst []descriptorDecision, bs *batchScratch) (outcome, error) {
	reqs := bs.reqs[:0]
	for i := range descs {
		d := &descs[i]
		reqs = append(reqs, Request{Key: d.Key, Limit: d.Limit, Cost: d.Cost, Now: now})
	}
	decided := slices.Grow(bs.decided[:0], len(descs))[:len(descs)]
	start := time.Now()
	n, err := DecideAll(ctx, l.store, reqs, decided)
	l.metrics.observe(time.Since(start))
	clear(reqs) // the keys are the request's: not kept past it
	bs.reqs, bs.decided = reqs, decided
	if err != nil {
		return outcome{}, err
	}
	o := outcome{allowed: true, decisions: slices.Grow(dst[:0], len(descs))[:len(descs)]}
	clear(o.decisions)
	for i := range descs {
		kind := descs[i].Limit.Kind
		switch {
		case i >= n:
			o.decisions[i] = descriptorDecision{Decision: algorithms.Decision{Limit: descs[i].Limit.Quota}, skipped: true}
			l.metrics.decision(kind, outSkipped)
		case decided[i].Allowed:
			o.decisions[i].Decision = decided[i]
			l.metrics.decision(kind, outAllowed)
		default:
			o.decisions[i].Decision = decided[i]
			l.metrics.decision(kind, outDenied)
			o.allowed = false
		}
	}
	l.metrics.check(o.allowed)
	return o, nil
}
