package service

import (
	"context"
	"errors"
	"hash/maphash"
	"sync"
	"time"

	"github.com/meshlimit/meshlimit/algorithms"
)

// MemoryConfig configures a MemoryStore. The zero value is usable.
type MemoryConfig struct {
	// MaxKeys bounds the number of keys held (default 1<<20). When a new key arrives at a full
	// shard, the store evicts, among a few sampled keys of that shard, the one whose state
	// expires first (like Redis's volatile-ttl policy); an evicted key starts fresh, so under
	// more distinct keys than MaxKeys a limit can admit more than its quota.
	MaxKeys int
	// SweepInterval is the period of the background sweep that deletes idle keys (default
	// 1s). A negative value disables the sweep (tests call sweep directly).
	SweepInterval time.Duration
	// Clock is the store's clock, used when a Request has no Now (default time.Now).
	Clock func() time.Time
}

const (
	memShards      = 64
	defaultMaxKeys = 1 << 20
	// evictSamples is how many keys of a full shard are compared to choose the one to evict.
	evictSamples = 8
)

// MemoryStore is a Store that keeps state in this process, deciding with the algorithms
// package under per-shard mutexes. Keys whose state is idle (algorithms.Limit.IdleAt) are
// deleted by a background sweep. It is the embedded default: it needs nothing installed, but
// its counts are not shared with other service replicas.
type MemoryStore struct {
	shards  [memShards]memShard
	permits [memShards]permitShard
	resets  resetRing // the reset log (resets_memory.go)
	seed    maphash.Seed
	perCap  int
	clock   func() time.Time
	stop    chan struct{}
	done    chan struct{}
	closeMu sync.Once
}

type memShard struct {
	mu sync.Mutex
	m  map[memKey]*memEntry
}

type memKey struct {
	kind algorithms.Kind
	key  string
}

type memEntry struct {
	limit   algorithms.Limit // the limit of the last decision, for IdleAt
	state   []byte
	expires int64 // unix ns after which the state is idle (an upper bound)
}

// NewMemoryStore returns a MemoryStore and starts its sweep, which Close stops.
func NewMemoryStore(cfg MemoryConfig) *MemoryStore {
	if cfg.MaxKeys <= 0 {
		cfg.MaxKeys = defaultMaxKeys
	}
	if cfg.SweepInterval == 0 {
		cfg.SweepInterval = time.Second
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	s := &MemoryStore{
		seed:   maphash.MakeSeed(),
		perCap: (cfg.MaxKeys + memShards - 1) / memShards,
		clock:  cfg.Clock,
		stop:   make(chan struct{}),
		done:   make(chan struct{}),
	}
	for i := range s.shards {
		s.shards[i].m = make(map[memKey]*memEntry)
	}
	if cfg.SweepInterval < 0 {
		close(s.done)
		return s
	}
	go s.sweepLoop(cfg.SweepInterval)
	return s
}

// Decide implements Store.
func (s *MemoryStore) Decide(ctx context.Context, req Request) (algorithms.Decision, error) {
	if err := req.validate(); err != nil {
		return algorithms.Decision{}, err
	}
	if err := ctx.Err(); err != nil {
		return algorithms.Decision{}, err
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
		e = &memEntry{}
		sh.m[k] = e
	}
	if e.state == nil {
		// Room for every fixed-size state; a sliding log grows as its entries do.
		e.state = make([]byte, 0, min(req.Limit.EncodedSize(), 64))
	}
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
	return d, nil
}

// evictOne deletes idle entries among a sample of the shard, or else the sampled entry that
// expires first. It requires sh.mu to be held and the shard to be non-empty.
func (sh *memShard) evictOne(now int64) {
	var victim memKey
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

// Ping implements Store; a MemoryStore is always ready.
func (s *MemoryStore) Ping(ctx context.Context) error { return ctx.Err() }

// Close stops the sweep. The state stays readable but is no longer swept.
func (s *MemoryStore) Close() error {
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

// Len returns the number of keys held (rate counters and permit sets).
func (s *MemoryStore) Len() int {
	n := s.permitKeys()
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += len(sh.m)
		sh.mu.Unlock()
	}
	return n
}

func (s *MemoryStore) sweepLoop(every time.Duration) {
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
func (s *MemoryStore) sweep(now int64) (deleted int) {
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
