package service

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/rueidis"

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
// charging. The counter behaves as a FixedWindow of quota algorithms.MaxQuota (a charge that
// would take it past MaxQuota is not counted): the MemoryStore keeps it with its fixed-window
// code; the RedisStore keeps one plain integer per window, charged with INCRBY (see
// RedisStore.countWindow).
func CountWindow(ctx context.Context, s Store, key string, w time.Duration, hits int64, now time.Time) (count int64, reset time.Duration, err error) {
	if hits < 0 {
		return 0, 0, errors.New("service: hits must be >= 0")
	}
	req := Request{Key: key, Limit: counterLimit(w), Cost: min(hits, algorithms.MaxQuota), Now: now}
	if c, ok := s.(windowCounter); ok {
		req.Cost = max(req.Cost, 1) // validated as a charge of at least 1; hits 0 charges nothing
		if err := req.validate(); err != nil {
			return 0, 0, err
		}
		return c.countWindow(ctx, req, min(hits, algorithms.MaxQuota))
	}
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

// windowCounter is a Store with a counter of its own.
type windowCounter interface {
	// countWindow adds hits (0 to MaxQuota) to req's counter (req.Limit is a counterLimit,
	// validated) and returns the count after the call and the time to the window's end (0
	// when the count is 0), as CountWindow does.
	countWindow(ctx context.Context, req Request, hits int64) (count int64, reset time.Duration, err error)
}

// peeker is a Store that can read a CountWindow counter without charging it.
type peeker interface {
	// peek returns the count and the time to the window's end of req's counter (req.Limit is
	// a counterLimit) without changing it.
	peek(ctx context.Context, req Request) (count int64, reset time.Duration, err error)
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
	count := algorithms.MaxQuota - d.Remaining
	if d.Allowed { // the copy was charged 1
		count--
	}
	if count == 0 {
		return 0, 0, nil
	}
	return count, d.Reset, nil
}

// counterGrace is how long a RedisStore counter outlives its window: a replica whose clock is
// behind (up to this much) still finds the window's count.
const counterGrace = time.Second

// countWindow implements windowCounter with no script: the count of a window is a plain
// integer under a key of its own (windowKey), charged with INCRBY and given a TTL (the time to
// the window's end and counterGrace) by PEXPIRE NX in the same round trip; hits 0 is a GET.
// That is a sixth of the Redis CPU of the fixed-window script. The window is chosen by the
// time of the request (req.Now), or else by s.clock, the local estimate of Redis TIME.
//
// A charge that takes the count past MaxQuota is undone with DECRBY, so that calls one after
// the other count exactly as a FixedWindow of quota MaxQuota does (the memory store's
// counter); only calls racing at MaxQuota (10^12 hits in one window) may see a count that
// another call is about to undo.
func (s *RedisStore) countWindow(ctx context.Context, req Request, hits int64) (int64, time.Duration, error) {
	now := req.Now
	if now.IsZero() {
		now = s.clock.now()
	}
	us := min(max(now.UnixMicro(), 0), maxTimeUs)
	w := int64(req.Limit.Window / time.Microsecond)
	start := us - us%w
	left := time.Duration(start+w-us) * time.Microsecond
	key := s.windowKey(req.Key, start)
	if hits == 0 {
		n, err := s.client.Do(ctx, s.client.B().Get().Key(key).Build()).AsInt64()
		if rueidis.IsRedisNil(err) || err == nil && n <= 0 {
			return 0, 0, nil
		}
		if err != nil {
			return 0, 0, s.redisErr(err)
		}
		return min(n, algorithms.MaxQuota), left, nil
	}
	ttl := int64((left + counterGrace + time.Millisecond - 1) / time.Millisecond)
	res := s.client.DoMulti(ctx,
		s.client.B().Incrby().Key(key).Increment(hits).Build(),
		s.client.B().Pexpire().Key(key).Milliseconds(ttl).Nx().Build())
	n, err := res[0].AsInt64()
	if err == nil {
		err = res[1].Error()
	}
	if err != nil {
		return 0, 0, s.redisErr(err)
	}
	if n > algorithms.MaxQuota { // a fixed window denies the charge: undo it
		if n, err = s.client.Do(ctx, s.client.B().Decrby().Key(key).Decrement(hits).Build()).AsInt64(); err != nil {
			return 0, 0, s.redisErr(err)
		}
		n = min(n, algorithms.MaxQuota)
	}
	return n, left, nil
}

// windowKey returns the Redis key of the count of key's window that starts at startUs:
// KeyPrefix + "{" + tag + "}:count:" + startUs + ":" + key, with the tag of RedisStore.key (the
// same Cluster slot as every other state of key).
func (s *RedisStore) windowKey(key string, startUs int64) string {
	return s.keyAt("count", startUs, key)
}
