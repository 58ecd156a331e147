// Package memstore is a service.Store that keeps its state in this process: the algorithms
// package over sharded, mutex-guarded maps (rate state, window counters, settles), permit sets
// under the same sharding, and the reset log in a ring. Idle keys are swept in the background
// and the number of keys is bounded. It is the service's embedded default: it needs nothing
// installed, but its counts are not shared with other service replicas, so it limits globally
// only with a single replica.
package memstore

import (
	"context"
	"errors"
	"hash/maphash"
	"sync"
	"time"

	"github.com/meshlimit/meshlimit/algorithms"
	"github.com/meshlimit/meshlimit/service"
)

var _ service.Store = (*Store)(nil)

// Config configures a Store. The zero value is usable.
type Config struct {
	// MaxKeys bounds the number of keys held (default 1<<20), rate state and permit sets each.
	// When a new key arrives at a full shard, the store evicts, among a few sampled keys of that
	// shard, the one whose state expires first (like Redis's volatile-ttl policy); an evicted
	// key starts fresh, so under more distinct keys than MaxKeys a limit can admit more than
	// its quota.
	MaxKeys int
	// SweepInterval is the period of the background sweep that deletes idle keys (default
	// 1s). A negative value disables the sweep (tests call sweep directly).
	SweepInterval time.Duration
	// Clock is the store's clock, used when a request has no Now (default time.Now).
	Clock func() time.Time
}

const (
	numShards      = 64
	defaultMaxKeys = 1 << 20
	// evictSamples is how many keys of a full shard are compared to choose the one to evict.
	evictSamples = 8
)

// Store is a service.Store in this process, deciding with the algorithms package under
// per-shard mutexes. Keys whose state is idle (algorithms.Limit.IdleAt) are deleted by a
// background sweep, which Close stops.
type Store struct {
	shards  [numShards]shard
	permits [numShards]permitShard
	resets  resetRing
	seed    maphash.Seed
	perCap  int
	clock   func() time.Time
	stop    chan struct{}
	done    chan struct{}
	closeMu sync.Once
}

// shard holds the rate state of the keys that hash to it.
type shard struct {
	mu sync.Mutex
	m  map[entryKey]*entry
}

type entryKey struct {
	kind algorithms.Kind
	key  string
}

type entry struct {
	limit   algorithms.Limit // the limit of the last decision, for IdleAt
	state   []byte
	expires int64 // unix ns after which the state is idle (an upper bound)
}

// New returns a Store and starts its sweep, which Close stops.
func New(cfg Config) *Store {
	if cfg.MaxKeys <= 0 {
		cfg.MaxKeys = defaultMaxKeys
	}
	if cfg.SweepInterval == 0 {
		cfg.SweepInterval = time.Second
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	s := &Store{
		seed:   maphash.MakeSeed(),
		perCap: (cfg.MaxKeys + numShards - 1) / numShards,
		clock:  cfg.Clock,
		stop:   make(chan struct{}),
		done:   make(chan struct{}),
	}
	for i := range s.shards {
		s.shards[i].m = make(map[entryKey]*entry)
	}
	if cfg.SweepInterval < 0 {
		close(s.done)
		return s
	}
	go s.sweepLoop(cfg.SweepInterval)
	return s
}

// now returns t, or the store's clock for the zero Time.
func (s *Store) now(t time.Time) time.Time {
	if t.IsZero() {
		return s.clock()
	}
	return t
}

// shardOf returns the shard of key's rate state.
func (s *Store) shardOf(key string) *shard {
	return &s.shards[maphash.String(s.seed, key)%numShards]
}

// Decide implements service.Store.
func (s *Store) Decide(ctx context.Context, req service.Request) (algorithms.Decision, error) {
	if err := req.Validate(); err != nil {
		return algorithms.Decision{}, err
	}
	if err := ctx.Err(); err != nil {
		return algorithms.Decision{}, err
	}
	ns := s.now(req.Now).UnixNano()
	sh := s.shardOf(req.Key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.entry(entryKey{req.Limit.Kind, req.Key}, req.Limit, ns, s.perCap)
	next, d, err := req.Limit.Decide(e.state, ns, req.Cost, e.state)
	if errors.Is(err, algorithms.ErrMalformedState) {
		// Unreadable state (written under another layout) cannot be trusted: start fresh.
		next, d, err = req.Limit.Decide(nil, ns, req.Cost, e.state)
	}
	if err != nil {
		return algorithms.Decision{}, err
	}
	e.limit, e.state = req.Limit, next
	e.expires = max(e.expires, ns+int64(req.Limit.TTL()))
	d.At = ns
	return d, nil
}

// Settle implements service.Store with algorithms.Limit.Settle (an undo: Limit.GiveBack) under
// the key's shard lock, and returns the units applied: given back by an undo or a refund,
// charged by an over-run.
func (s *Store) Settle(ctx context.Context, req service.SettleRequest) (int64, error) {
	if err := req.Validate(); err != nil {
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	ns := s.now(req.Now).UnixNano()
	sh := s.shardOf(req.Key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.entry(entryKey{req.Limit.Kind, req.Key}, req.Limit, ns, s.perCap)
	apply := req.Limit.Settle
	if req.Undo {
		apply = func(state []byte, now, at, delta int64, dst []byte) ([]byte, int64, error) {
			return req.Limit.GiveBack(state, now, at, -delta, !req.At.IsZero(), dst)
		}
	}
	at := req.TakenAt(ns)
	next, given, err := apply(e.state, ns, at, req.Delta, e.state)
	if errors.Is(err, algorithms.ErrMalformedState) {
		next, given, err = apply(nil, ns, at, req.Delta, e.state)
	}
	if err != nil {
		return 0, err
	}
	e.limit, e.state = req.Limit, next
	if !req.Undo { // an undo leaves no debt: the entry lives as a decision left it
		// A debt lasts at most algorithms.MaxDebt capacities past the TTL (algorithms.Limit.Adjust);
		// the sweep also asks IdleAt, which reads the debt from the state.
		e.expires = max(e.expires, ns+(algorithms.MaxDebt+1)*int64(req.Limit.TTL()))
	}
	return given, nil
}

// entry returns the entry of k, made (after an eviction when the shard holds perCap keys)
// with room for l's state when there is none. It requires sh.mu.
func (sh *shard) entry(k entryKey, l algorithms.Limit, now int64, perCap int) *entry {
	e := sh.m[k]
	if e == nil {
		if len(sh.m) >= perCap {
			sh.evictOne(now)
		}
		e = &entry{}
		sh.m[k] = e
	}
	if e.state == nil {
		// Room for every fixed-size state; a sliding log grows as its entries do.
		e.state = make([]byte, 0, min(l.EncodedSize(), 64))
	}
	return e
}

// evictOne deletes idle entries among a sample of the shard, or else the sampled entry that
// expires first. It requires sh.mu to be held and the shard to be non-empty.
func (sh *shard) evictOne(now int64) {
	var victim entryKey
	first, n := int64(1<<63-1), 0
	for k, e := range sh.m { // map iteration starts at a random entry
		if e.expires <= now {
			delete(sh.m, k)
			return
		}
		if e.expires < first {
			victim, first = k, e.expires
		}
		if n++; n == evictSamples {
			break
		}
	}
	delete(sh.m, victim)
}

// Ping implements service.Store; a Store is always ready.
func (s *Store) Ping(ctx context.Context) error { return ctx.Err() }

// Stats implements service.Store: the keys held, rate state and permit sets.
func (s *Store) Stats() service.Stats {
	n := 0
	for i := range numShards {
		n += s.shards[i].len() + s.permits[i].len()
	}
	return service.Stats{Keys: n, Evicted: -1}
}

// Close stops the sweep. The state stays readable but is no longer swept.
func (s *Store) Close() error {
	s.closeMu.Do(func() {
		select {
		case <-s.done: // the sweep is disabled
		default:
			close(s.stop)
			<-s.done
		}
	})
	return nil
}

// len returns the number of keys with rate state in sh.
func (sh *shard) len() int {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return len(sh.m)
}

func (s *Store) sweepLoop(every time.Duration) {
	defer close(s.done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			now := s.clock().UnixNano()
			s.sweep(now)
			s.sweepPermits(now)
		}
	}
}

// sweep deletes every key whose state is idle at now (unix ns), one shard lock at a time.
func (s *Store) sweep(now int64) (deleted int) {
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for k, e := range sh.m {
			if e.expires <= now || e.limit.IdleAt(e.state, now) {
				delete(sh.m, k)
				deleted++
			}
		}
		sh.mu.Unlock()
	}
	return deleted
}
