package memstore

import (
	"context"
	"hash/maphash"
	"maps"
	"sync"
	"time"

	"github.com/meshlimit/meshlimit/service"
)

// The permit operations of Store: per key, a map from permit id to the end of its lease
// (unix ns), under the lock of the key's shard. Like the rate state, the permits of at most
// MaxKeys keys are held; a full shard first drops keys whose permits all expired, then the
// sampled key whose last lease ends first (its holders' permits are forgotten: the store
// then admits more than the limit, as an evicted counter does).

// permitShard holds the permit sets of the keys that hash to it.
type permitShard struct {
	mu sync.Mutex
	m  map[string]map[string]int64
}

// permitSet returns the permits of key in sh (creating them when create is set), with the
// expired ones removed and counted. It requires sh.mu.
func (s *Store) permitSet(sh *permitShard, key string, now int64, create bool) (set map[string]int64, reclaimed int64) {
	if sh.m == nil {
		sh.m = make(map[string]map[string]int64)
	}
	set = sh.m[key]
	if set == nil {
		if !create {
			return nil, 0
		}
		if len(sh.m) >= s.perCap {
			sh.evictPermits(now)
		}
		set = make(map[string]int64)
		sh.m[key] = set
	}
	for id, end := range set {
		if end <= now {
			delete(set, id)
			reclaimed++
		}
	}
	return set, reclaimed
}

// evictPermits makes room in a full shard. It requires sh.mu.
func (sh *permitShard) evictPermits(now int64) {
	var victim string
	first, n := int64(1<<63-1), 0
	for k, set := range sh.m {
		last := int64(0)
		for _, end := range set {
			last = max(last, end)
		}
		if last <= now {
			delete(sh.m, k)
			return
		}
		if last < first {
			victim, first = k, last
		}
		if n++; n == evictSamples {
			break
		}
	}
	delete(sh.m, victim)
}

// permitShard returns the shard of key's permits and the time t, or now, in unix ns.
func (s *Store) permitShard(key string, t time.Time) (*permitShard, int64) {
	return &s.permits[maphash.String(s.seed, key)%numShards], s.now(t).UnixNano()
}

// Acquire implements service.Store.
func (s *Store) Acquire(ctx context.Context, req service.PermitRequest) (service.PermitResult, error) {
	if err := req.Validate(service.PermitAcquire); err != nil {
		return service.PermitResult{}, err
	}
	if err := ctx.Err(); err != nil {
		return service.PermitResult{}, err
	}
	sh, now := s.permitShard(req.Key, req.Now)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	set, reclaimed := s.permitSet(sh, req.Key, now, true)
	_, held := set[req.Permit]
	allowed := held || int64(len(set)) < req.Limit
	if allowed {
		set[req.Permit] = now + int64(req.Lease)
	} else if len(set) == 0 {
		delete(sh.m, req.Key)
	}
	return service.PermitResult{Allowed: allowed, Held: int64(len(set)), Reclaimed: reclaimed}, nil
}

// Renew implements service.Store.
func (s *Store) Renew(ctx context.Context, req service.PermitRequest) (bool, error) {
	if err := req.Validate(service.PermitRenew); err != nil {
		return false, err
	}
	if err := ctx.Err(); err != nil {
		return false, err
	}
	sh, now := s.permitShard(req.Key, req.Now)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	set, _ := s.permitSet(sh, req.Key, now, false)
	if _, ok := set[req.Permit]; !ok {
		return false, nil
	}
	set[req.Permit] = now + int64(req.Lease)
	return true, nil
}

// Release implements service.Store.
func (s *Store) Release(ctx context.Context, req service.PermitRequest) (bool, error) {
	if err := req.Validate(service.PermitRelease); err != nil {
		return false, err
	}
	if err := ctx.Err(); err != nil {
		return false, err
	}
	sh, _ := s.permitShard(req.Key, req.Now)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	set := sh.m[req.Key]
	if _, ok := set[req.Permit]; !ok {
		return false, nil
	}
	delete(set, req.Permit)
	if len(set) == 0 {
		delete(sh.m, req.Key)
	}
	return true, nil
}

// sweepPermits deletes the expired permits, and the keys left without any, at now (unix ns).
func (s *Store) sweepPermits(now int64) (deleted int) {
	for i := range s.permits {
		sh := &s.permits[i]
		sh.mu.Lock()
		for k, set := range sh.m {
			maps.DeleteFunc(set, func(_ string, end int64) bool { return end <= now })
			if len(set) == 0 {
				delete(sh.m, k)
				deleted++
			}
		}
		sh.mu.Unlock()
	}
	return deleted
}

// len returns the number of keys with permits held in sh.
func (sh *permitShard) len() int {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return len(sh.m)
}
