package redisstore

import (
	"context"
	"strconv"
	"time"

	"github.com/meshlimit/meshlimit/service"
)

// Settle implements service.Store: one EVALSHA of the kind's settle script on the descriptor's
// state key, with the same TTL as a decision, or longer while the key is in debt. An undo of a
// kind that settles is the refund of a reservation of its age (algorithms.Limit.Undo: the same
// arithmetic); the sliding kinds have an undo script of their own, which keeps the key's TTL. A
// request's At (the decision's time, on the Redis clock that made it) is the scripts' time of
// the take instead of now - Age.
//
// It returns the units applied: given back by an undo or a refund, charged by an over-run (the
// scripts' answer).
func (s *Store) Settle(ctx context.Context, req service.SettleRequest) (int64, error) {
	if err := req.Validate(); err != nil {
		return 0, err
	}
	return s.settleAt(ctx, req, pexpireMs(req.Limit.TTL()))
}

// settleAt runs req's settle script with the given PEXPIRE in milliseconds and returns the units
// it applied (Settle).
func (s *Store) settleAt(ctx context.Context, req service.SettleRequest, ttlMs int64) (int64, error) {
	l := req.Limit
	args := scriptArgs(make([]string, 0, scriptArgCount+1), l, req.Delta, ttlMs, req.Now, strconv.FormatInt(int64(req.Age/time.Microsecond), 10))
	if !req.At.IsZero() { // ARGV[10]: the decision's time, which the scripts use instead of the age (lua/taken_at.lua)
		args = append(args, strconv.FormatInt(clampUs(req.At), 10))
	}
	script := s.scripts.settle[l.Kind]
	if req.Undo && !l.Kind.Settles() {
		script = s.scripts.undo[l.Kind]
	}
	given, err := script.Exec(ctx, s.client, []string{s.stateKey(l.Kind, req.Key)}, args).AsInt64()
	if err != nil {
		return 0, s.redisErr(err)
	}
	return given, nil
}
