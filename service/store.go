package service

import (
	"context"
	"errors"
	"time"

	"github.com/meshlimit/meshlimit/algorithms"
	"github.com/meshlimit/meshlimit/wire"
)

// Store decides one descriptor atomically: it reads the descriptor's state, applies the
// algorithm and writes the next state back, with no other decision on the same key in between.
// Implementations are safe for concurrent use.
type Store interface {
	// Decide decides req. It returns an error, never a partial decision, when the store cannot
	// be reached or ctx ends first; state is then unchanged or fully updated, never torn.
	// Invalid requests (see Request) are rejected with an error before the store is touched.
	Decide(ctx context.Context, req Request) (algorithms.Decision, error)
	// Ping reports whether the store can serve decisions (for /readyz).
	Ping(ctx context.Context) error
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
	// Now is the decision time. The zero Time means the store's own clock (Redis TIME for
	// RedisStore, so every service replica agrees), which is what production uses; a
	// non-zero Now exists for tests and replays.
	Now time.Time
}

// validate reports what is wrong with r.
func (r Request) validate() error {
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

// maxTimeUs is the latest time the algorithms represent, 2^52 µs after the epoch.
const maxTimeUs = wire.MaxTimeUs
