package e2e

import (
	"context"
	"time"

	"github.com/meshlimit/meshlimit/algorithms"
	"github.com/meshlimit/meshlimit/service"
)

// clockedStore is the store of a test's decision service on the test's clock: every call that
// leaves the time to the store (the zero Now: Redis TIME, the wall clock) is made at now()
// instead. What the service decides then depends neither on when the test runs (a minute boundary
// a few ms before an admission) nor on how fast the machine runs it (a bucket refilling while a
// loaded machine is slow). A call that names its time keeps it.
type clockedStore struct {
	service.Store
	now func() time.Time
}

// onClock returns store with now as its clock.
func onClock(store service.Store, now func() time.Time) *clockedStore {
	return &clockedStore{Store: store, now: now}
}

func (c *clockedStore) at(t time.Time) time.Time {
	if t.IsZero() {
		return c.now()
	}
	return t
}

// Decide implements service.Store.
func (c *clockedStore) Decide(ctx context.Context, req service.Request) (algorithms.Decision, error) {
	req.Now = c.at(req.Now)
	return c.Store.Decide(ctx, req)
}

// Settle implements service.Store.
func (c *clockedStore) Settle(ctx context.Context, req service.SettleRequest) (int64, error) {
	req.Now = c.at(req.Now)
	return c.Store.Settle(ctx, req)
}

// CountWindow implements service.Store.
func (c *clockedStore) CountWindow(ctx context.Context, req service.CountRequest) (int64, time.Duration, error) {
	req.Now = c.at(req.Now)
	return c.Store.CountWindow(ctx, req)
}

// Acquire implements service.Store.
func (c *clockedStore) Acquire(ctx context.Context, req service.PermitRequest) (service.PermitResult, error) {
	req.Now = c.at(req.Now)
	return c.Store.Acquire(ctx, req)
}

// Renew implements service.Store.
func (c *clockedStore) Renew(ctx context.Context, req service.PermitRequest) (bool, error) {
	req.Now = c.at(req.Now)
	return c.Store.Renew(ctx, req)
}

// Release implements service.Store.
func (c *clockedStore) Release(ctx context.Context, req service.PermitRequest) (bool, error) {
	req.Now = c.at(req.Now)
	return c.Store.Release(ctx, req)
}

// Inspect implements service.Store.
func (c *clockedStore) Inspect(ctx context.Context, req service.Request) (service.KeyState, error) {
	req.Now = c.at(req.Now)
	return c.Store.Inspect(ctx, req)
}
