package service

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/rueidis"

	"github.com/meshlimit/meshlimit/wire"
)

// The permit operations of RedisStore: each is one EVALSHA of its script (lua/permit_*.lua)
// on the key's permit set, ml:{<tag>}:concurrency:<key>, a sorted set of permit ids scored by
// the end of their lease in Redis TIME microseconds. The hash tag is that of the key's rate
// counters, so a Cluster routes a key's permits and counters to one slot.

const (
	permitAcquire = iota
	permitRenew
	permitRelease
	numPermitOps
)

var permitScripts = [numPermitOps]string{"permit_acquire.lua", "permit_renew.lua", "permit_release.lua"}

// loadPermitScripts prepares the permit scripts and adds them to the sources loaded on every node.
func (s *RedisStore) loadPermitScripts() error {
	for op, name := range permitScripts {
		b, err := luaFS.ReadFile("lua/" + name)
		if err != nil {
			return err
		}
		s.permit[op] = rueidis.NewLuaScript(string(b))
		s.sources = append(s.sources, string(b))
	}
	return nil
}

// PermitKey returns the Redis key that holds the permits of key.
func (s *RedisStore) PermitKey(key string) string { return s.key(wire.Concurrency, key) }

// Acquire implements PermitStore.
func (s *RedisStore) Acquire(ctx context.Context, req PermitRequest) (PermitResult, error) {
	if err := req.validate(true); err != nil {
		return PermitResult{}, err
	}
	if req.Limit < 1 {
		return PermitResult{}, fmt.Errorf("service: permit limit %d, want >= 1", req.Limit)
	}
	v, err := s.permitOp(ctx, permitAcquire, req, 3, strconv.FormatInt(req.Limit, 10), req.Permit, leaseUs(req.Lease), nowArg(req.Now))
	if err != nil {
		return PermitResult{}, err
	}
	return PermitResult{Allowed: v[0] == 1, Held: v[1], Reclaimed: v[2]}, nil
}

// Renew implements PermitStore.
func (s *RedisStore) Renew(ctx context.Context, req PermitRequest) (bool, error) {
	if err := req.validate(true); err != nil {
		return false, err
	}
	v, err := s.permitOp(ctx, permitRenew, req, 2, req.Permit, leaseUs(req.Lease), nowArg(req.Now))
	return err == nil && v[0] == 1, err
}

// Release implements PermitStore.
func (s *RedisStore) Release(ctx context.Context, req PermitRequest) (bool, error) {
	if err := req.validate(false); err != nil {
		return false, err
	}
	v, err := s.permitOp(ctx, permitRelease, req, 1, req.Permit)
	return err == nil && v[0] == 1, err
}

// permitOp runs script op on req's permit set and checks that it returned want integers.
func (s *RedisStore) permitOp(ctx context.Context, op int, req PermitRequest, want int, args ...string) ([]int64, error) {
	v, err := s.permit[op].Exec(ctx, s.client, []string{s.PermitKey(req.Key)}, args).AsIntSlice()
	if err != nil {
		return nil, s.redisErr(err)
	}
	if len(v) != want {
		return nil, fmt.Errorf("service: redis: %s returned %d values, want %d", permitScripts[op], len(v), want)
	}
	return v, nil
}

func leaseUs(d time.Duration) string { return strconv.FormatInt(int64(d/time.Microsecond), 10) }

// nowArg is the now_us argument of a script: empty (Redis TIME) for the zero Time.
func nowArg(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return strconv.FormatInt(min(max(t.UnixMicro(), 0), maxTimeUs), 10)
}
