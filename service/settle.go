package service

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/meshlimit/meshlimit/algorithms"
	"github.com/meshlimit/meshlimit/wire"
)

// SettleStore applies settles: the difference between a reservation a descriptor charged and
// the cost the request turned out to have (algorithms.Limit.Adjust), atomically on its key and
// without a decision.
type SettleStore interface {
	// Settle applies req and returns the units it actually applied, never more than |Delta|. For an undo, the units given back (algorithms.Limit.GiveBack): 0 when the
	// admission's window has rolled over, its log entries expired or were given back already, or
	// its time names none. For a refund, the units given back (algorithms.Limit.Settle): what a
	// fixed window's count lost (0 when the reservation's window is over), or the span a bucket's
	// TAT moved back by in units, rounded up (0 for a full bucket). For an over-run, the units
	// charged: Delta, or less when the debt stopped at algorithms.MaxDebt capacities.
	Settle(ctx context.Context, req SettleRequest) (applied int64, err error)
}

// SettleRequest is one settle: Delta units (< 0 a refund, > 0 an over-run) to Key under Limit,
// for a reservation decided Age before now. The zero Now means the store's clock, as for Request.
//
// With Undo, it gives back an admission instead (algorithms.Limit.Undo): -Delta units that a
// decision admitted Age before now, for a request that was then not served (a later rule denied
// it, or its answer is one a count_on rule does not count). An undo is exact for every kind; its
// Delta is < 0.
//
// A non-zero At is the time the store decided the admission or the reservation at, on its own
// clock (algorithms.Decision.At, which the answer carried as at_us and the settle carries back):
// the entry then applies as of At, and Age is not used. So an undo (a refund) reaches exactly the
// window, the log entries or the counts that took it, however long it took to come and however
// soon after a window began the take was; an age can only bound that time from below.
type SettleRequest struct {
	Key   string
	Limit algorithms.Limit
	Delta int64
	Age   time.Duration
	At    time.Time
	Now   time.Time
	Undo  bool
}

// TakenAt is when the settled admission or reservation was decided (unix ns), for a settle applied
// at now (unix ns): At when set, else now - Age.
func (r SettleRequest) TakenAt(now int64) int64 {
	if !r.At.IsZero() {
		return r.At.UnixNano()
	}
	return now - int64(r.Age)
}

// Validate reports what is wrong with r; a settle of a kind that keeps no exact state to refund
// into (Kind.Settles) is refused, an undo of any kind is not (but its Delta must be < 0).
func (r SettleRequest) Validate() error {
	switch {
	case r.Key == "":
		return errors.New("service: empty key")
	case r.Undo && r.Delta >= 0:
		return fmt.Errorf("service: an undo gives back a cost: delta must be < 0, got %d", r.Delta)
	case !r.Undo && !r.Limit.Kind.Settles():
		return fmt.Errorf("service: %v does not settle a cost", r.Limit.Kind)
	case r.Age < 0:
		return errors.New("service: negative settle age")
	case !r.At.IsZero() && (r.At.UnixMicro() < 0 || r.At.UnixMicro() > wire.MaxTimeUs):
		return fmt.Errorf("service: a settle's time %v is out of range", r.At)
	}
	return r.Limit.Validate()
}

// settle applies a check's settle list, in order, and returns how many entries it applied. Each
// entry counts the units its store applied (gave back, or charged), not the ones it asked for.
func (l *limiter) settle(ctx context.Context, list []wire.Settle, now time.Time) (int, error) {
	for i, s := range list {
		req := SettleRequest{Key: s.Key, Limit: s.Limit, Delta: s.Delta, Age: s.Age, Now: now, Undo: s.Undo}
		if s.AtUs > 0 {
			req.At = time.UnixMicro(s.AtUs)
		}
		applied, err := l.store.Settle(ctx, req)
		if err != nil {
			return i, err
		}
		l.metrics.settled(s.Undo, s.Delta, applied)
	}
	return len(list), nil
}
