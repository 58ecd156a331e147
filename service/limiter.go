package service

import (
	"context"
	"slices"
	"time"

	"github.com/meshlimit/meshlimit/algorithms"
	"github.com/meshlimit/meshlimit/wire"
)

// Descriptor is one limit of a check: charge Cost units to Key under Limit (the wire
// contract's descriptor, as decoded from a check request).
type Descriptor = wire.Descriptor

// Outcome is the result of a check: one decision per descriptor, in request order.
type Outcome struct {
	// Allowed reports whether every descriptor allowed the request.
	Allowed   bool
	Decisions []DescriptorDecision
}

// DescriptorDecision is one descriptor's decision.
type DescriptorDecision struct {
	algorithms.Decision
	// Skipped reports that the descriptor was not evaluated (nor charged) because an earlier
	// one denied the request; only Limit is set.
	Skipped bool
}

// Limiter checks batches of descriptors against a Store: in order, each atomically, stopping
// at the first denial (see the package documentation). It is safe for concurrent use.
type Limiter struct {
	store   Store
	metrics *Metrics
}

// NewLimiter returns a Limiter over store that records into m (which may be nil).
func NewLimiter(store Store, m *Metrics) *Limiter {
	if m == nil {
		m = new(Metrics)
	}
	return &Limiter{store: store, metrics: m}
}

// Check decides descs at now (the zero Time: the store's clock). It returns an error, and no
// Outcome, if the store fails or ctx ends; descriptors decided before the failure stay charged.
// A permit descriptor (Descriptor.Permit set) acquires its permit from the store, which must
// be a PermitStore; a denied check gives back the permits it acquired.
func (l *Limiter) Check(ctx context.Context, descs []Descriptor, now time.Time) (Outcome, error) {
	return l.check(ctx, descs, now, nil)
}

// check is Check with the decisions appended to dst[:0].
func (l *Limiter) check(ctx context.Context, descs []Descriptor, now time.Time, dst []DescriptorDecision) (Outcome, error) {
	o := Outcome{Allowed: true, Decisions: slices.Grow(dst[:0], len(descs))[:len(descs)]}
	clear(o.Decisions)
	acquired := false
	for i := range descs {
		d := &descs[i]
		if !o.Allowed {
			o.Decisions[i] = DescriptorDecision{Decision: algorithms.Decision{Limit: d.Limit.Quota}, Skipped: true}
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
			return Outcome{}, err
		}
		o.Decisions[i].Decision = dec
		if dec.Allowed {
			l.metrics.decision(d.Limit.Kind, outAllowed)
		} else {
			l.metrics.decision(d.Limit.Kind, outDenied)
			o.Allowed = false
		}
	}
	if acquired && !o.Allowed {
		l.releaseAcquired(ctx, descs, &o, now)
	}
	l.metrics.check(o.Allowed)
	return o, nil
}
