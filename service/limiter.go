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
func (l *limiter) check(ctx context.Context, descs []wire.Descriptor, now time.Time, dst []descriptorDecision) (outcome, error) {
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
