package service

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meshlimit/meshlimit/algorithms"
)

// ErrOverloaded is wrapped by the error of a store call a Gate refused before the store: the
// work ahead of it would not have been done within its deadline. A call refused after waiting
// until its context ended also wraps the context's error.
var ErrOverloaded = errors.New("service: the store cannot answer in time (overloaded)")

// DefaultStoreTimeout is a GateConfig's StoreTimeout when zero.
const DefaultStoreTimeout = 250 * time.Millisecond

// GateConfig configures a Gate.
type GateConfig struct {
	// MinWork is the bound of the work in flight on the store the gate starts at and never goes
	// under, in descriptors: a batch of n counts n, any other call 1 (at least 1; a batch larger
	// than MinWork counts MinWork, so that it can always be admitted). Zero means MaxWork: a
	// fixed bound.
	MinWork int
	// MaxWork is the most work in flight on the store the gate ever admits, in descriptors (at
	// least MinWork). Between the two, the bound in force grows while the store keeps up and
	// shrinks when it does not (see Gate).
	MaxWork int
	// StoreTimeout bounds a call once it is sent to the store, in place of its caller's
	// deadline (default DefaultStoreTimeout): it ends the calls to a store that does not
	// answer at all.
	StoreTimeout time.Duration
	// Now is the gate's clock (default time.Now), which measures the store's time and compares
	// it with the callers' deadlines.
	Now func() time.Time
}

// Gate admits to its Store only the calls the store can answer within their deadline. A call
// waits for room in the work in flight, the flows (WithFlow) served in turn and each flow first
// come first served. The bound of the work in flight starts at GateConfig.MinWork descriptors, raised
// by the work of each call the store answered within twice the least time it took lately while
// others waited for room (it keeps up: its time does not grow with the work sent), lowered by an
// eighth by each call that took longer, never under MinWork nor over MaxWork. It is refused at once with
// ErrOverloaded when its expected wait plus the store's time per call (both measured) would
// pass its context's deadline, and while it waits when its context ends. Once admitted, a call
// is sent under GateConfig.StoreTimeout, not its caller's deadline: its answer is always
// read and returned, never thrown away after the store has done its work. A request of more
// than one store call is admitted whole (Admit) before its first call, or refused whole. Every store call but
// the rest of the Store (Ping, Stats, Close, keys, resets) goes through the gate. Stats counts
// the calls refused and the answers that came after their caller's deadline.
type Gate struct {
	Store
	now          func() time.Time
	storeTimeout time.Duration
	mu           sync.Mutex
	adm          admission
	refused      atomic.Int64
	late         atomic.Int64
}

// NewGate returns a Gate of cfg in front of s.
func NewGate(s Store, cfg GateConfig) *Gate {
	if cfg.StoreTimeout <= 0 {
		cfg.StoreTimeout = DefaultStoreTimeout
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	ceiling := int64(max(cfg.MaxWork, 1))
	floor := ceiling
	if cfg.MinWork > 0 {
		floor = min(int64(cfg.MinWork), ceiling)
	}
	return &Gate{Store: s, now: cfg.Now, storeTimeout: cfg.StoreTimeout,
		adm: admission{max: floor, floor: floor, ceiling: ceiling, flows: map[any]*flow{}}}
}

// pass is a call admitted to the store: its work and deadline, and when it was sent.
type pass struct {
	work     int64
	deadline time.Time
	sent     time.Time
}

// enter admits a call of work units under ctx, waiting for room if it must, or refuses it.
func (g *Gate) enter(ctx context.Context, work int) (pass, error) {
	dl, _ := ctx.Deadline()
	p := pass{work: min(max(int64(work), 1), g.adm.floor), deadline: dl}
	g.mu.Lock()
	now := g.now()
	w, ok := g.adm.arrive(flowOf(ctx), p.work, now, dl)
	g.mu.Unlock()
	if !ok {
		g.refused.Add(1)
		return p, ErrOverloaded
	}
	if w != nil {
		if err := g.await(ctx, w); err != nil {
			g.refused.Add(1)
			return p, err
		}
	}
	p.sent = g.now()
	return p, nil
}

// await waits until w leaves the queue, or ctx ends first.
func (g *Gate) await(ctx context.Context, w *waiter) error {
	select {
	case <-w.ready:
	case <-ctx.Done():
		g.mu.Lock()
		queued := g.adm.cancel(w)
		if queued {
			g.adm.dispatch(g.now()) // room may now fit the next in turn
		}
		g.mu.Unlock()
		if queued {
			return fmt.Errorf("%w: %w", ErrOverloaded, ctx.Err())
		}
	}
	if !w.admitted {
		return ErrOverloaded
	}
	return nil
}

// leave ends an admitted call, and admits those its room now fits.
func (g *Gate) leave(p pass) {
	g.mu.Lock()
	now := g.now()
	g.adm.ended(p.work, now.Sub(p.sent))
	g.adm.dispatch(now)
	g.mu.Unlock()
	if !p.deadline.IsZero() && now.After(p.deadline) {
		g.late.Add(1)
	}
}

// admittedKey is the context key of a request admitted whole by a Gate (Admit).
type admittedKey struct{}

// admitted is a request admitted whole by gate: the pass its store calls ride, and whether it
// has been given back.
type admitted struct {
	gate *Gate
	pass pass
	done bool // set by release; guarded by gate.mu
}

// release gives the request's room back; a second release does nothing.
func (a *admitted) release() {
	a.gate.mu.Lock()
	done := a.done
	a.done = true
	a.gate.mu.Unlock()
	if !done {
		a.gate.leave(a.pass)
	}
}

// holds reports whether ctx carries a request admitted whole by g.
func (g *Gate) holds(ctx context.Context) bool {
	a, ok := ctx.Value(admittedKey{}).(*admitted)
	return ok && a.gate == g
}

// Admit admits a request's whole store work, work units counted as the gate counts its calls
// (a batch of n descriptors n, any other call 1), or refuses it whole, before any of its store
// calls: it waits, or refuses with ErrOverloaded, as one call of work units would. Once
// admitted, every store call made through g under the returned context (or one derived from
// it) rides the admission: none waits, none is refused or cancelled by the gate, each runs
// under GateConfig.StoreTimeout. The caller must call release when its store work is done
// (after its last call; a second call does nothing): the time from Admit to release is the
// store's time the gate measures for work units. Under a context that already carries g's
// admission, or of no work (work <= 0), Admit admits nothing and its release does nothing.
func (g *Gate) Admit(ctx context.Context, work int) (_ context.Context, release func(), err error) {
	if work <= 0 || g.holds(ctx) {
		return ctx, func() {}, nil
	}
	p, err := g.enter(ctx, work)
	if err != nil {
		return ctx, func() {}, err
	}
	a := &admitted{gate: g, pass: p}
	return context.WithValue(ctx, admittedKey{}, a), a.release, nil
}

// Admitter admits a request's whole store work before its first store call (Gate.Admit).
type Admitter interface {
	Admit(ctx context.Context, work int) (context.Context, func(), error)
}

// Admit admits the store work of one request, work units, whole on s when s is an Admitter (a
// Gate), or refuses it whole before any store call; on any other store it admits at once. A
// front that makes more than one store call for a request admits it first, so that a gate
// cannot refuse a later call after earlier ones changed the store. See Gate.Admit.
func Admit(ctx context.Context, s Store, work int) (context.Context, func(), error) {
	if a, ok := s.(Admitter); ok {
		return a.Admit(ctx, work)
	}
	return ctx, func() {}, nil
}

// gated runs call on the store as a call of work units admitted by g under ctx: on its own,
// or riding the admission of its whole request (Admit) when ctx carries one of g's.
func gated[T any](g *Gate, ctx context.Context, work int, call func(context.Context) (T, error)) (T, error) {
	if !g.holds(ctx) {
		p, err := g.enter(ctx, work)
		if err != nil {
			var zero T
			return zero, err
		}
		defer g.leave(p)
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.storeTimeout)
	defer cancel()
	return call(sctx)
}

// Decide implements Store.
func (g *Gate) Decide(ctx context.Context, req Request) (algorithms.Decision, error) {
	return gated(g, ctx, 1, func(ctx context.Context) (algorithms.Decision, error) { return g.Store.Decide(ctx, req) })
}

// DecideAll implements BatchDecider: a batch is one call of len(reqs) units.
func (g *Gate) DecideAll(ctx context.Context, reqs []Request, out []algorithms.Decision) (int, error) {
	return gated(g, ctx, len(reqs), func(ctx context.Context) (int, error) { return DecideAll(ctx, g.Store, reqs, out) })
}

// windowCount is CountWindow's answer.
type windowCount struct {
	n     int64
	reset time.Duration
}

// CountWindow implements Store.
func (g *Gate) CountWindow(ctx context.Context, req CountRequest) (int64, time.Duration, error) {
	c, err := gated(g, ctx, 1, func(ctx context.Context) (windowCount, error) {
		n, reset, err := g.Store.CountWindow(ctx, req)
		return windowCount{n, reset}, err
	})
	return c.n, c.reset, err
}

// CountWindows implements BatchCounter: a batch is one call of len(reqs) units.
func (g *Gate) CountWindows(ctx context.Context, reqs []CountRequest, out []CountResult) error {
	_, err := gated(g, ctx, len(reqs), func(ctx context.Context) (struct{}, error) {
		return struct{}{}, CountWindows(ctx, g.Store, reqs, out)
	})
	return err
}

// Settle implements Store.
func (g *Gate) Settle(ctx context.Context, req SettleRequest) (int64, error) {
	return gated(g, ctx, 1, func(ctx context.Context) (int64, error) { return g.Store.Settle(ctx, req) })
}

// Acquire implements Store.
func (g *Gate) Acquire(ctx context.Context, req PermitRequest) (PermitResult, error) {
	return gated(g, ctx, 1, func(ctx context.Context) (PermitResult, error) { return g.Store.Acquire(ctx, req) })
}

// Renew implements Store.
func (g *Gate) Renew(ctx context.Context, req PermitRequest) (bool, error) {
	return gated(g, ctx, 1, func(ctx context.Context) (bool, error) { return g.Store.Renew(ctx, req) })
}

// Release implements Store.
func (g *Gate) Release(ctx context.Context, req PermitRequest) (bool, error) {
	return gated(g, ctx, 1, func(ctx context.Context) (bool, error) { return g.Store.Release(ctx, req) })
}

// Queued is the number of calls (or requests, Admit) waiting in g's queue for room.
func (g *Gate) Queued() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.adm.queue)
}

// Stats implements Store: the Store's, with the calls the Gate refused and the answers that
// came after their caller's deadline.
func (g *Gate) Stats() Stats {
	st := g.Store.Stats()
	st.Overloaded, st.Late, st.Gated = g.refused.Load(), g.late.Load(), true
	return st
}
