package service

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/meshlimit/meshlimit/algorithms"
)

// CountWindow is envoyproxy/ratelimit's counter on a meshlimit Store: it adds hits to the
// counter named key in the window of length w that contains now (windows aligned to multiples
// of w since the Unix epoch; the zero now means the store's clock) and returns the count after
// the call and the time left until that window ends (0 when the count is 0).
//
// Unlike a limit, the counter has no quota: every call is charged, whatever the count, so that
// a caller can compare the count to a limit that may change between calls without losing the
// counts (the limit is not part of the counter's identity). hits 0 reads the count without
// charging. The counter is a FixedWindow of quota algorithms.MaxQuota, so both stores keep it
// with their existing fixed-window code (the Lua script for Redis, one key in one Cluster
// slot); a count never exceeds MaxQuota.
func CountWindow(ctx context.Context, s Store, key string, w time.Duration, hits int64, now time.Time) (count int64, reset time.Duration, err error) {
	if hits < 0 {
		return 0, 0, errors.New("service: hits must be >= 0")
	}
	req := Request{Key: key, Limit: counterLimit(w), Cost: min(hits, algorithms.MaxQuota), Now: now}
	var d algorithms.Decision
	if hits == 0 {
		p, ok := s.(peeker)
		if !ok {
			return 0, 0, fmt.Errorf("service: %T cannot read a counter without charging it", s)
		}
		req.Cost = 1 // validated as a charge of 1, never charged
		if err := req.validate(); err != nil {
			return 0, 0, err
		}
		count, reset, err = p.peek(ctx, req)
		return count, reset, err
	}
	if d, err = s.Decide(ctx, req); err != nil {
		return 0, 0, err
	}
	return algorithms.MaxQuota - d.Remaining, d.Reset, nil
}

// counterLimit is the limit under which CountWindow keeps its counters.
func counterLimit(w time.Duration) algorithms.Limit {
	return algorithms.Limit{Kind: algorithms.FixedWindow, Quota: algorithms.MaxQuota, Window: w}
}

// peeker is a Store that can read a CountWindow counter without charging it.
type peeker interface {
	// peek returns the count and the time to the window's end of req's counter (req.Limit is
	// a counterLimit) without changing it.
	peek(ctx context.Context, req Request) (count int64, reset time.Duration, err error)
}

// peek implements peeker: the fixed-window script with a cost of 0 charges nothing (it
// rewrites the same window start and count, and refreshes the expiry).
func (s *RedisStore) peek(ctx context.Context, req Request) (int64, time.Duration, error) {
	req.Cost = 0
	d, err := s.decide(ctx, req, int64((req.Limit.TTL()+time.Millisecond-1)/time.Millisecond))
	if err != nil {
		return 0, 0, err
	}
	return algorithms.MaxQuota - d.Remaining, d.Reset, nil
}

// peek implements peeker: it decides a charge of 1 on a copy of the state and keeps nothing.
func (s *MemoryStore) peek(ctx context.Context, req Request) (int64, time.Duration, error) {
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
	count := algorithms.MaxQuota - d.Remaining - 1
	if count == 0 {
		return 0, 0, nil
	}
	return count, d.Reset, nil
}
