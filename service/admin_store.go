package service

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/meshlimit/meshlimit/algorithms"
)

// peekState reports what an encoded state holds for limit at now: a state that cannot be read is
// reported as fresh, as the stores decide on it.
func peekState(limit algorithms.Limit, state []byte, now time.Time) (KeyState, error) {
	d, err := limit.Peek(state, now.UnixNano())
	if errors.Is(err, algorithms.ErrMalformedState) {
		d, err = limit.Peek(nil, now.UnixNano())
	}
	if err != nil {
		return KeyState{}, err
	}
	return KeyState{Found: len(state) > 0, Remaining: d.Remaining, Reset: d.Reset}, nil
}

// Inspect implements KeyStore.
func (s *MemoryStore) Inspect(ctx context.Context, req Request) (KeyState, error) {
	if err := req.validate(); err != nil {
		return KeyState{}, err
	}
	state, now := s.snapshot(req)
	return peekState(req.Limit, state, now)
}

// Reset implements KeyStore.
func (s *MemoryStore) Reset(ctx context.Context, req Request) (bool, error) {
	if err := req.validate(); err != nil {
		return false, err
	}
	k := memKey{req.Limit.Kind, req.Key}
	sh := &s.shards[maphash.String(s.seed, req.Key)%memShards]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	_, ok := sh.m[k]
	delete(sh.m, k)
	return ok, nil
}

// Inspect implements KeyStore: it reads the key's fields as the scripts store them (see lua/) and
// rebuilds the algorithms package's encoding of the state (algorithms/doc.go) to peek at it. The
// time is req.Now or the service's clock.
func (s *RedisStore) Inspect(ctx context.Context, req Request) (KeyState, error) {
	if err := req.validate(); err != nil {
		return KeyState{}, err
	}
	now := req.Now
	if now.IsZero() {
		now = time.Now()
	}
	state, err := s.readState(ctx, req)
	if err != nil {
		return KeyState{}, err
	}
	return peekState(req.Limit, state, now)
}

// readState returns the encoded state of req's key, or nil when it has none.
func (s *RedisStore) readState(ctx context.Context, req Request) ([]byte, error) {
	key := s.Key(req)
	k := req.Limit.Kind
	if k == algorithms.SlidingLog {
		raw, err := s.client.Do(ctx, s.client.B().Get().Key(key).Build()).ToString()
		if rueidis.IsRedisNil(err) {
			return nil, nil
		}
		if err != nil {
			return nil, s.redisErr(err)
		}
		return encodeLog(raw)
	}
	fields := map[algorithms.Kind][]string{
		algorithms.TokenBucket:   {"i", "f"},
		algorithms.LeakyBucket:   {"i", "f"},
		algorithms.FixedWindow:   {"s", "k"},
		algorithms.SlidingWindow: {"s", "p", "k"},
	}[k]
	msgs, err := s.client.Do(ctx, s.client.B().Hmget().Key(key).Field(fields...).Build()).ToArray()
	if err != nil {
		return nil, s.redisErr(err)
	}
	state := []byte{1<<4 | byte(k)}
	for i := range msgs {
		if msgs[i].IsNil() {
			return nil, nil
		}
		v, err := msgs[i].AsInt64()
		if err != nil || v < 0 {
			return nil, fmt.Errorf("service: redis: key %s field %s: not a state", key, fields[i])
		}
		state = binary.BigEndian.AppendUint64(state, uint64(v))
	}
	return state, nil
}

// encodeLog turns the sliding log's run-length string "clock t1 n1 t2 n2 ..." into the algorithms
// package's encoding: the clock, then one entry per unit.
func encodeLog(raw string) ([]byte, error) {
	bad := errors.New("service: redis: sliding log: not a state")
	vals := strings.Fields(raw)
	if len(vals)%2 != 1 {
		return nil, bad
	}
	nums := make([]int64, len(vals))
	for i, v := range vals {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return nil, bad
		}
		nums[i] = n
	}
	state := binary.BigEndian.AppendUint64([]byte{1<<4 | byte(algorithms.SlidingLog)}, uint64(nums[0]))
	units := int64(0)
	for i := 1; i+1 < len(nums); i += 2 {
		for range min(nums[i+1], algorithms.MaxLogQuota-units) {
			state = binary.BigEndian.AppendUint64(state, uint64(nums[i]))
			units++
		}
	}
	return state, nil
}

// Reset implements KeyStore.
func (s *RedisStore) Reset(ctx context.Context, req Request) (bool, error) {
	if err := req.validate(); err != nil {
		return false, err
	}
	n, err := s.client.Do(ctx, s.client.B().Del().Key(s.Key(req)).Build()).AsInt64()
	if err != nil {
		return false, s.redisErr(err)
	}
	return n > 0, nil
}

// snapshot returns a copy of req's state (nil when the key has none) and the time to read it at:
// req.Now, or the store's clock.
func (s *MemoryStore) snapshot(req Request) ([]byte, time.Time) {
	now := req.Now
	if now.IsZero() {
		now = s.clock()
	}
	sh := &s.shards[maphash.String(s.seed, req.Key)%memShards]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	var state []byte
	if e := sh.m[memKey{req.Limit.Kind, req.Key}]; e != nil {
		state = append(state, e.state...)
	}
	return state, now
}
