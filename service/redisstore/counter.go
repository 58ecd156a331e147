package redisstore

import (
	"context"
	"time"

	"github.com/redis/rueidis"

	"github.com/meshlimit/meshlimit/algorithms"
	"github.com/meshlimit/meshlimit/service"
)

// counterGrace is how long a counter outlives its window: a replica whose clock is behind (up
// to this much) still finds the window's count.
const counterGrace = time.Second

// CountWindow implements service.Store with no script: the count of a window is a plain
// integer under a key of its own (windowKey), charged with INCRBY and given a TTL (the time to
// the window's end and counterGrace) by PEXPIRE NX in the same round trip; hits 0 is a GET.
// That is a sixth of the Redis CPU of the fixed-window script. The window is chosen by the
// time of the request (req.Now), or else by s.clock, the local estimate of Redis TIME.
//
// A charge that takes the count past MaxQuota is undone with DECRBY, so that calls one after
// the other count exactly as a FixedWindow of quota MaxQuota does (the memory store's
// counter); only calls racing at MaxQuota (10^12 hits in one window) may see a count that
// another call is about to undo.
func (s *Store) CountWindow(ctx context.Context, req service.CountRequest) (int64, time.Duration, error) {
	if err := req.Validate(); err != nil {
		return 0, 0, err
	}
	now := req.Now
	if now.IsZero() {
		now = s.clock.now()
	}
	hits := min(req.Hits, algorithms.MaxQuota)
	us := clampUs(now)
	w := int64(req.Window / time.Microsecond)
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
	ttl := pexpireMs(left + counterGrace)
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
// KeyPrefix + "{" + tag + "}:count:" + startUs + ":" + key, with the tag of Store.key (the
// same Cluster slot as every other state of key).
func (s *Store) windowKey(key string, startUs int64) string {
	return s.keyAt("count", startUs, key)
}
