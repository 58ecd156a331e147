package service

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/meshlimit/meshlimit/algorithms"
)

// ErrOverloaded is wrapped by the error of a decision call that waited for a Gate's slot until
// its context ended: the call never reached the store. It also wraps the context's error, so
// that a call past its deadline is counted as a timeout.
var ErrOverloaded = errors.New("service: the store is at its bound of calls in flight")

// Gate bounds the decision calls in flight on its Store (Decide, CountWindow, CountWindows; the
// rest of the Store is its own): at most Max at once, the others queued, first come first
// served, each for as long as its context allows. So a burst past what the store answers in
// time waits in this process instead of piling up at the store, where every call in the pile
// would be late and still cost the store its work; a call whose deadline passes in the queue
// fails (ErrOverloaded) without costing the store anything. Stats counts the calls refused so.
type Gate struct {
	Store
	slots chan struct{}
	shed  atomic.Int64
}

// NewGate returns a Gate of at most limit decision calls in flight on s (at least 1).
func NewGate(s Store, limit int) *Gate {
	return &Gate{Store: s, slots: make(chan struct{}, max(limit, 1))}
}

// enter takes a slot, waiting until one is free or ctx ends.
func (g *Gate) enter(ctx context.Context) error {
	select {
	case g.slots <- struct{}{}:
		return nil
	default:
	}
	select {
	case g.slots <- struct{}{}:
		return nil
	case <-ctx.Done():
		g.shed.Add(1)
		return fmt.Errorf("%w: %w", ErrOverloaded, ctx.Err())
	}
}

func (g *Gate) leave() { <-g.slots }

// Decide implements Store.
func (g *Gate) Decide(ctx context.Context, req Request) (algorithms.Decision, error) {
	if err := g.enter(ctx); err != nil {
		return algorithms.Decision{}, err
	}
	defer g.leave()
	return g.Store.Decide(ctx, req)
}

// CountWindow implements Store.
func (g *Gate) CountWindow(ctx context.Context, req CountRequest) (int64, time.Duration, error) {
	if err := g.enter(ctx); err != nil {
		return 0, 0, err
	}
	defer g.leave()
	return g.Store.CountWindow(ctx, req)
}

// CountWindows implements BatchCounter: a batch is one call (one round trip) and takes one slot.
func (g *Gate) CountWindows(ctx context.Context, reqs []CountRequest, out []CountResult) error {
	if err := g.enter(ctx); err != nil {
		return err
	}
	defer g.leave()
	return CountWindows(ctx, g.Store, reqs, out)
}

// Stats implements Store: the Store's, with the calls the Gate refused.
func (g *Gate) Stats() Stats {
	st := g.Store.Stats()
	st.Overloaded, st.Gated = g.shed.Load(), true
	return st
}

// DecideAll implements BatchDecider: a batch is one call (one round trip on Redis) and takes one
// slot.
func (g *Gate) DecideAll(ctx context.Context, reqs []Request, out []algorithms.Decision) (int, error) {
	if err := g.enter(ctx); err != nil {
		return 0, err
	}
	defer g.leave()
	return DecideAll(ctx, g.Store, reqs, out)
}
