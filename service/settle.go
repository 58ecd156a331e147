package service

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"strconv"
	"time"

	"github.com/redis/rueidis"

	"github.com/meshlimit/meshlimit/algorithms"
	"github.com/meshlimit/meshlimit/wire"
)

// SettleStore applies settles: the difference between a reservation a descriptor charged and
// the cost the request turned out to have (algorithms.Limit.Adjust), atomically on its key and
// without a decision. RedisStore and MemoryStore implement it.
type SettleStore interface {
	Settle(ctx context.Context, req SettleRequest) error
}

// SettleRequest is one settle: Delta units (< 0 a refund, > 0 an over-run) to Key under Limit,
// for a reservation decided Age before now. The zero Now means the store's clock, as for Request.
type SettleRequest struct {
	Key   string
	Limit algorithms.Limit
	Delta int64
	Age   time.Duration
	Now   time.Time
}

// errNoSettles is the error of a settle on a store that cannot apply one.
var errNoSettles = errors.New("service: the store does not settle costs")

func (r SettleRequest) validate() error {
	switch {
	case r.Key == "":
		return errors.New("service: empty key")
	case !r.Limit.Kind.Settles():
		return fmt.Errorf("service: %v does not settle a cost", r.Limit.Kind)
	case r.Age < 0:
		return errors.New("service: negative settle age")
	}
	return r.Limit.Validate()
}

// settle applies a check's settle list, in order, and returns how many entries it applied.
func (l *Limiter) settle(ctx context.Context, list []wire.Settle, now time.Time) (int, error) {
	ss, ok := l.store.(SettleStore)
	if !ok {
		return 0, errNoSettles
	}
	for i, s := range list {
		err := ss.Settle(ctx, SettleRequest{Key: s.Key, Limit: s.Limit, Delta: s.Delta, Age: s.Age, Now: now})
		if err != nil {
			return i, err
		}
		l.metrics.settled(s.Delta)
	}
	return len(list), nil
}

// SettleScript returns the Lua source that settles a cost of kind (see lua/lib.lua): lib.lua
// followed by the algorithm's settle body.
func SettleScript(kind algorithms.Kind) (string, error) {
	switch kind {
	case algorithms.TokenBucket:
		return composeScript("local LEAKY = false\n", "lib.lua", "gcra_state.lua", "gcra_settle.lua")
	case algorithms.LeakyBucket:
		return composeScript("local LEAKY = true\n", "lib.lua", "gcra_state.lua", "gcra_settle.lua")
	case algorithms.FixedWindow:
		return composeScript("", "lib.lua", "fixed_window_settle.lua")
	}
	return "", fmt.Errorf("service: %v does not settle a cost", kind)
}

// loadSettleScripts prepares the settle scripts and adds them to the sources loaded on every node.
func (s *RedisStore) loadSettleScripts() error {
	for _, k := range algorithms.Kinds {
		if !k.Settles() {
			continue
		}
		src, err := SettleScript(k)
		if err != nil {
			return err
		}
		s.settle[k] = rueidis.NewLuaScript(src)
		s.sources = append(s.sources, src)
	}
	return nil
}

// Settle implements SettleStore: one EVALSHA of the kind's settle script on the descriptor's
// state key, with the same TTL as a decision, or longer while the key is in debt.
func (s *RedisStore) Settle(ctx context.Context, req SettleRequest) error {
	if err := req.validate(); err != nil {
		return err
	}
	return s.settleAt(ctx, req, int64((req.Limit.TTL()+time.Millisecond-1)/time.Millisecond))
}

// settleAt runs req's settle script with the given PEXPIRE in milliseconds.
func (s *RedisStore) settleAt(ctx context.Context, req SettleRequest, ttlMs int64) error {
	l := req.Limit
	args := append(limitArgs(l, req.Delta, ttlMs, req.Now), strconv.FormatInt(int64(req.Age/time.Microsecond), 10))
	key := s.key(l.Kind.String(), req.Key)
	if err := s.settle[l.Kind].Exec(ctx, s.client, []string{key}, args).Error(); err != nil {
		return s.redisErr(err)
	}
	return nil
}

// Settle implements SettleStore with algorithms.Limit.Adjust under the key's shard lock.
func (s *MemoryStore) Settle(ctx context.Context, req SettleRequest) error {
	if err := req.validate(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	now := req.Now
	if now.IsZero() {
		now = s.clock()
	}
	ns := now.UnixNano()
	k := memKey{req.Limit.Kind, req.Key}
	sh := &s.shards[maphash.String(s.seed, req.Key)%memShards]

	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.m[k]
	if e == nil {
		if len(sh.m) >= s.perCap {
			sh.evictOne(ns)
		}
		e = &memEntry{state: make([]byte, 0, req.Limit.EncodedSize())}
		sh.m[k] = e
	}
	next, err := req.Limit.Adjust(e.state, ns, ns-int64(req.Age), req.Delta, e.state)
	if errors.Is(err, algorithms.ErrMalformedState) {
		next, err = req.Limit.Adjust(nil, ns, ns-int64(req.Age), req.Delta, e.state)
	}
	if err != nil {
		return err
	}
	// A debt lasts at most one capacity past the TTL (algorithms.Limit.Adjust); the sweep also
	// asks IdleAt, which reads the debt from the state.
	e.limit, e.state = req.Limit, next
	e.expires = max(e.expires, ns+2*int64(req.Limit.TTL()))
	return nil
}
