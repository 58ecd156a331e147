package memstore

import (
	"context"
	"errors"
	"time"

	"github.com/meshlimit/meshlimit/algorithms"
	"github.com/meshlimit/meshlimit/service"
)

// Inspect implements service.Store.
func (s *Store) Inspect(ctx context.Context, req service.Request) (service.KeyState, error) {
	if err := req.Validate(); err != nil {
		return service.KeyState{}, err
	}
	state, now := s.snapshot(req)
	return service.PeekState(req.Limit, state, now)
}

// Reset implements service.Store.
func (s *Store) Reset(ctx context.Context, req service.Request) (bool, error) {
	if err := req.Validate(); err != nil {
		return false, err
	}
	k := entryKey{req.Limit.Kind, req.Key}
	sh := s.shardOf(req.Key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	_, ok := sh.m[k]
	delete(sh.m, k)
	return ok, nil
}

// snapshot returns a copy of req's state (nil when the key has none) and the time to read it at:
// req.Now, or the store's clock.
func (s *Store) snapshot(req service.Request) ([]byte, time.Time) {
	now := s.now(req.Now)
	sh := s.shardOf(req.Key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	var state []byte
	if e := sh.m[entryKey{req.Limit.Kind, req.Key}]; e != nil {
		state = append(state, e.state...)
	}
	return state, now
}

// CountWindow implements service.Store with the fixed-window code: the counter is the rate
// state of a FixedWindow of quota algorithms.MaxQuota (service.CountRequest.Limit).
func (s *Store) CountWindow(ctx context.Context, r service.CountRequest) (int64, time.Duration, error) {
	if err := r.Validate(); err != nil {
		return 0, 0, err
	}
	req := service.Request{Key: r.Key, Limit: r.Limit(), Cost: min(r.Hits, algorithms.MaxQuota), Now: r.Now}
	if r.Hits == 0 {
		return s.peek(ctx, req)
	}
	d, err := s.Decide(ctx, req)
	if err != nil {
		return 0, 0, err
	}
	return algorithms.MaxQuota - d.Remaining, d.Reset, nil
}

// CountWindows implements service.BatchCounter: the memory store has no round trip to save,
// so it counts reqs one after the other.
func (s *Store) CountWindows(ctx context.Context, reqs []service.CountRequest, out []service.CountResult) error {
	return service.CountWindows(ctx, countOnly{s}, reqs, out)
}

// countOnly is the store as a plain WindowCounter (not a BatchCounter), for
// service.CountWindows's loop.
type countOnly struct{ s *Store }

func (c countOnly) CountWindow(ctx context.Context, r service.CountRequest) (int64, time.Duration, error) {
	return c.s.CountWindow(ctx, r)
}

// peek returns the count and the time to the window's end of req's counter without changing
// it: it decides a charge of 1 on a copy of the state and keeps nothing.
func (s *Store) peek(ctx context.Context, req service.Request) (int64, time.Duration, error) {
	if err := ctx.Err(); err != nil {
		return 0, 0, err
	}
	state, now := s.snapshot(req)
	_, d, err := req.Limit.Decide(state, now.UnixNano(), 1, nil)
	if errors.Is(err, algorithms.ErrMalformedState) {
		return 0, 0, nil // Decide starts such a state fresh
	}
	if err != nil {
		return 0, 0, err
	}
	count := algorithms.MaxQuota - d.Remaining
	if d.Allowed { // the copy was charged 1
		count--
	}
	if count == 0 {
		return 0, 0, nil
	}
	return count, d.Reset, nil
}
