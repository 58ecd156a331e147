package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/meshlimit/meshlimit/service"
	"github.com/meshlimit/meshlimit/wire"
)

// The permit operations of Store: each is one EVALSHA of its script (lua/permit_*.lua)
// on the key's permit set, ml:{<tag>}:concurrency:<key>, a sorted set of permit ids scored by
// the end of their lease in Redis TIME microseconds. The hash tag is that of the key's rate
// counters, so a Cluster routes a key's permits and counters to one slot.

// permitKey returns the Redis key that holds the permits of key.
func (s *Store) permitKey(key string) string { return s.key(wire.Concurrency, key) }

// Acquire implements service.Store.
func (s *Store) Acquire(ctx context.Context, req service.PermitRequest) (service.PermitResult, error) {
	if err := req.Validate(service.PermitAcquire); err != nil {
		return service.PermitResult{}, err
	}
	v, err := s.permitOp(ctx, service.PermitAcquire, req, 3, strconv.FormatInt(req.Limit, 10), req.Permit, leaseUs(req.Lease), nowArg(req.Now))
	if err != nil {
		return service.PermitResult{}, err
	}
	return service.PermitResult{Allowed: v[0] == 1, Held: v[1], Reclaimed: v[2]}, nil
}

// Renew implements service.Store.
func (s *Store) Renew(ctx context.Context, req service.PermitRequest) (bool, error) {
	if err := req.Validate(service.PermitRenew); err != nil {
		return false, err
	}
	v, err := s.permitOp(ctx, service.PermitRenew, req, 2, req.Permit, leaseUs(req.Lease), nowArg(req.Now))
	return err == nil && v[0] == 1, err
}

// Release implements service.Store.
func (s *Store) Release(ctx context.Context, req service.PermitRequest) (bool, error) {
	if err := req.Validate(service.PermitRelease); err != nil {
		return false, err
	}
	v, err := s.permitOp(ctx, service.PermitRelease, req, 1, req.Permit)
	return err == nil && v[0] == 1, err
}

// permitOp runs the script of op on req's permit set and checks that it returned want integers.
func (s *Store) permitOp(ctx context.Context, op service.PermitOp, req service.PermitRequest, want int, args ...string) ([]int64, error) {
	v, err := s.scripts.permit[op].Exec(ctx, s.client, []string{s.permitKey(req.Key)}, args).AsIntSlice()
	if err != nil {
		return nil, s.redisErr(err)
	}
	if len(v) != want {
		return nil, fmt.Errorf("redisstore: %s returned %d values, want %d", permitScripts[op], len(v), want)
	}
	return v, nil
}

func leaseUs(d time.Duration) string { return strconv.FormatInt(int64(d/time.Microsecond), 10) }
