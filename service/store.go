package service

import (
	"context"
	"errors"
	"time"

	"github.com/meshlimit/meshlimit/algorithms"
)

// Store keeps the state of the service's limits and decides on it: the rate state of
// descriptors, the window counters of the envoyproxy/ratelimit front, concurrency permits and
// the reset log. Package memstore keeps it in this process; package redisstore in Redis.
//
// Every operation is atomic on its key, and implementations are safe for concurrent use. An
// invalid request (see its Validate) is refused with an error before the store is touched. An
// operation that cannot reach the store, or whose ctx ends first, returns an error, never a
// partial result: the key's state is then unchanged or fully updated, never torn.
type Store interface {
	// Decide decides one descriptor: it reads the state of req's key, applies the algorithm and
	// writes the next state back, with no other operation on the key in between.
	Decide(ctx context.Context, req Request) (algorithms.Decision, error)
	WindowCounter
	SettleStore
	PermitStore
	KeyStore
	ResetLog
	// Ping reports whether the store can serve decisions (for /readyz).
	Ping(ctx context.Context) error
	// Stats reports what the store counts of itself, for /metrics.
	Stats() Stats
	// Close releases the store's resources; the store must not be used afterwards.
	Close() error
}

// Request is one descriptor to decide.
type Request struct {
	// Key identifies the counter. Keys are scoped by algorithm: the same Key under two Kinds
	// names two independent counters.
	Key string
	// Limit is the rate limit; it must be valid (Limit.Validate).
	Limit algorithms.Limit
	// Cost is the number of units to charge, >= 1.
	Cost int64
	// Now is the decision time. The zero Time means the store's own clock (Redis TIME for the
	// Redis store, so every service replica agrees), which is what production uses; a non-zero
	// Now exists for tests and replays.
	Now time.Time
}

// Validate reports what is wrong with r.
func (r Request) Validate() error {
	if r.Key == "" {
		return errors.New("service: empty key")
	}
	if err := r.Limit.Validate(); err != nil {
		return err
	}
	if r.Cost < 1 {
		return errors.New("service: cost must be >= 1")
	}
	return nil
}

// Stats is what a store reports of itself on /metrics; -1 stands for a figure the store does
// not keep.
type Stats struct {
	// Keys is the number of keys held in this process (meshlimit_memory_keys): rate state and
	// permit sets of the memory store.
	Keys int
	// Evicted is the number of keys Redis evicted while the store watched (the growth of
	// evicted_keys between two Pings; meshlimit_store_evicted_keys_total).
	Evicted int64
	// FullFallbacks is the number of decisions a FullFallback made in its local store while
	// the store was full (meshlimit_store_full_fallbacks_total, shown once there is one).
	FullFallbacks int64
	// Overloaded is the number of store calls a Gate refused before the store: they could not
	// be answered within their deadline (0 without a Gate).
	Overloaded int64
	// Late is the number of store calls a Gate admitted whose answer came after their caller's
	// deadline: answered, not thrown away, but a sign that the Gate's estimate was short.
	Late int64
	// Gated says a Gate stands in front of the store: meshlimit_store_overloaded_total is
	// then exported from the start, at 0 until a call is refused.
	Gated bool
}

// ErrStoreFull is wrapped by the errors of a store that refuses writes for lack of memory:
// Redis answers OOM when it reaches maxmemory under the noeviction policy. A check then gets a
// 503 (counted as meshlimit_errors_total{kind="store_full"}) and /readyz fails.
var ErrStoreFull = errors.New("service: the store is full: Redis refuses writes (OOM)")
