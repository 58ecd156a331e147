package service

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/meshlimit/meshlimit/algorithms"
	"github.com/meshlimit/meshlimit/wire"
)

// PermitStore holds concurrency permits: at most Limit permits of a key at once, each held
// until it is released or its lease ends (so that a holder that dies, or loses the end of a
// stream, cannot keep one longer).
type PermitStore interface {
	// Acquire admits req.Permit when fewer than req.Limit permits of req.Key are held after
	// the expired ones are reclaimed, or when it is held already (a retried acquire: its lease
	// is renewed and it is counted once).
	Acquire(ctx context.Context, req PermitRequest) (PermitResult, error)
	// Renew extends the lease of a held permit to req.Lease from now and reports whether it
	// was still held (false: released, or reclaimed at the end of its lease).
	Renew(ctx context.Context, req PermitRequest) (bool, error)
	// Release gives a permit back and reports whether it was held.
	Release(ctx context.Context, req PermitRequest) (bool, error)
}

// PermitRequest names a permit of a key. Limit is used by Acquire, Lease by Acquire and
// Renew. The zero Now means the store's clock (Redis TIME), as for Request.
type PermitRequest struct {
	Key, Permit string
	Limit       int64
	Lease       time.Duration
	Now         time.Time
}

// PermitOp is an operation of a PermitStore.
type PermitOp int

// The operations of a PermitStore.
const (
	PermitAcquire PermitOp = iota
	PermitRenew
	PermitRelease
)

// Validate reports what is wrong with r for op: every operation names a key and a permit,
// Acquire and Renew need a lease, and Acquire a limit of at least 1.
func (r PermitRequest) Validate(op PermitOp) error {
	switch {
	case r.Key == "" || r.Permit == "":
		return errors.New("service: a permit needs a key and an id")
	case op != PermitRelease && r.Lease <= 0:
		return errors.New("service: a permit needs a lease")
	case op == PermitAcquire && r.Limit < 1:
		return fmt.Errorf("service: permit limit %d, want >= 1", r.Limit)
	}
	return nil
}

// PermitResult is the result of an Acquire.
type PermitResult struct {
	Allowed bool
	// Held is the number of permits of the key held afterwards.
	Held int64
	// Reclaimed is the number of expired permits the acquire removed.
	Reclaimed int64
}

// acquire decides permit descriptor d as a descriptor decision: never a Retry-After (the
// time a permit frees is not known: a release may come at any moment), and the permits
// still free as Remaining.
func (l *limiter) acquire(ctx context.Context, d *wire.Descriptor, now time.Time) (algorithms.Decision, error) {
	r, err := l.store.Acquire(ctx, PermitRequest{Key: d.Key, Permit: d.Permit, Limit: d.Limit.Quota, Lease: d.Lease, Now: now})
	if err != nil {
		return algorithms.Decision{}, err
	}
	l.metrics.reclaimed(r.Reclaimed)
	dec := algorithms.Decision{Allowed: r.Allowed, Limit: d.Limit.Quota, Remaining: max(d.Limit.Quota-r.Held, 0)}
	if !r.Allowed {
		dec.RetryAfter = algorithms.RetryNever
	}
	return dec, nil
}

// releaseAcquired gives back the permits a denied check acquired before its denial: a denied
// request holds nothing. A failure is left to the leases.
func (l *limiter) releaseAcquired(ctx context.Context, descs []wire.Descriptor, o *outcome, now time.Time) {
	for i := range descs {
		if d := &descs[i]; d.Permit != "" && o.decisions[i].Allowed {
			_, _ = l.store.Release(ctx, PermitRequest{Key: d.Key, Permit: d.Permit, Now: now})
		}
	}
}

// permitCounts is what a check's renew and release lists did: the permits renewed and
// released, and the renew entries not renewed (bit i: entry i).
type permitCounts struct {
	renewed, released int
	lost              uint64
}

// permits releases, then renews, the permits a check lists.
func (l *limiter) permits(ctx context.Context, renew, release []wire.PermitRef, now time.Time) (c permitCounts, err error) {
	for _, r := range release {
		held, err := l.store.Release(ctx, PermitRequest{Key: r.Key, Permit: r.Permit, Now: now})
		if err != nil {
			return permitCounts{}, err
		}
		if held {
			c.released++
		}
	}
	for i, r := range renew { // at most wire.MaxDescriptors: i fits the bit set
		held, err := l.store.Renew(ctx, PermitRequest{Key: r.Key, Permit: r.Permit, Lease: r.Lease, Now: now})
		if err != nil {
			return permitCounts{}, err
		}
		if held {
			c.renewed++
		} else {
			c.lost |= 1 << i
			l.metrics.lost()
		}
	}
	return c, nil
}
