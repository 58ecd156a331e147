package service

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meshlimit/meshlimit/algorithms"
)

// FullFallback is a Store that decides in Local the keys its Store refuses for lack of memory
// (ErrStoreFull): with the Redis store, the new keys of a full Redis, which still decides the
// keys it holds exactly. A new client is then limited by this replica's memory (each replica
// counts on its own, so up to one quota per replica) instead of falling to its rule's
// failure_mode. Everything but Decide is the Store's. Stats counts the decisions made in Local.
//
// No counter is ever forgotten before its state is restored: FullFallback holds at most MaxKeys
// keys in Local at once, each until its counter is full again (the decision's Reset); a new
// key past them is denied (RetryAfter: until the first held one is free), so Local must be
// able to hold MaxKeys keys without evicting (LocalMaxKeys).
type FullFallback struct {
	Store
	// Local decides what Store refuses as full: the memory store, of LocalMaxKeys(MaxKeys).
	Local Store
	// MaxKeys bounds the keys decided in Local at once (default 1<<20).
	MaxKeys int
	// Now is the clock of a request without its own Now (nil: time.Now).
	Now func() time.Time

	fallbacks atomic.Int64

	mu       sync.Mutex
	held     map[heldKey]int64 // unix ns when the key's counter is full again
	nextScan int64             // unix ns before which a full held is not scanned again
}

type heldKey struct {
	kind algorithms.Kind
	key  string
}

// fallbackScanEvery bounds how often a full FullFallback scans for freed keys: newcomers in
// between are denied, so that a flood cannot make every call a scan of MaxKeys keys.
const fallbackScanEvery = 100 * time.Millisecond

// memShards is the memory store's shard count: its MaxKeys is split evenly over them.
const memShards = 64

// LocalMaxKeys is the MaxKeys to give the memory store under a FullFallback of maxKeys so that
// it never evicts while the FullFallback holds maxKeys keys (its bound is per shard).
func LocalMaxKeys(maxKeys int) int { return maxKeys * memShards }

// Decide implements Store.
func (f *FullFallback) Decide(ctx context.Context, req Request) (algorithms.Decision, error) {
	d, err := f.Store.Decide(ctx, req)
	if !errors.Is(err, ErrStoreFull) {
		return d, err
	}
	f.fallbacks.Add(1)
	now := req.Now
	if now.IsZero() {
		now = f.now()
		req.Now = now
	}
	k := heldKey{req.Limit.Kind, req.Key}
	f.mu.Lock()
	defer f.mu.Unlock()
	if retry, ok := f.admitLocked(k, now.UnixNano()); !ok {
		return algorithms.Decision{Limit: req.Limit.Quota, RetryAfter: retry, Reset: retry}, nil
	}
	d, err = f.Local.Decide(ctx, req)
	if err == nil {
		f.held[k] = now.UnixNano() + int64(max(d.Reset, time.Second))
	} else if _, ok := f.held[k]; !ok {
		f.held[k] = now.UnixNano() + int64(time.Second) // what Local may have kept
	}
	return d, err
}

// admitLocked says whether k may be decided in Local at now: held already, or room for it
// (after dropping the keys whose counters are full again); else the time until room. f.mu is held.
func (f *FullFallback) admitLocked(k heldKey, now int64) (time.Duration, bool) {
	if f.held == nil {
		f.held = make(map[heldKey]int64)
	}
	if _, ok := f.held[k]; ok || len(f.held) < f.maxKeys() {
		return 0, true
	}
	first := int64(0)
	if now >= f.nextScan {
		for hk, until := range f.held {
			if until <= now {
				delete(f.held, hk)
			} else if first == 0 || until < first {
				first = until
			}
		}
		f.nextScan = now + int64(fallbackScanEvery)
		if len(f.held) < f.maxKeys() {
			return 0, true
		}
	}
	return time.Duration(max(first, f.nextScan) - now), false
}

func (f *FullFallback) maxKeys() int {
	if f.MaxKeys <= 0 {
		return 1 << 20
	}
	return f.MaxKeys
}

func (f *FullFallback) now() time.Time {
	if f.Now != nil {
		return f.Now()
	}
	return time.Now()
}

// Stats implements Store: the Store's, with the decisions made in Local.
func (f *FullFallback) Stats() Stats {
	st := f.Store.Stats()
	st.FullFallbacks = f.fallbacks.Load()
	return st
}

// Close implements Store: it closes both stores.
func (f *FullFallback) Close() error {
	return errors.Join(f.Store.Close(), f.Local.Close())
}

// CountWindows implements BatchCounter with the Store's batch (one round trip on Redis): a
// window counter never falls back to Local (a full Redis refuses its INCRBY as any write).
func (f *FullFallback) CountWindows(ctx context.Context, reqs []CountRequest, out []CountResult) error {
	return CountWindows(ctx, f.Store, reqs, out)
}

// DecideAll implements BatchDecider with the Store's batch (one round trip on Redis); from the
// request the Store refuses as full on, the requests are decided one by one as Decide decides
// them (in Local when the Store refuses them again).
func (f *FullFallback) DecideAll(ctx context.Context, reqs []Request, out []algorithms.Decision) (int, error) {
	n, err := DecideAll(ctx, f.Store, reqs, out)
	if !errors.Is(err, ErrStoreFull) {
		return n, err
	}
	m, err := DecideEach(ctx, f, reqs[n:], out[n:])
	if err != nil {
		return 0, err // a FullFallback's Decide does not fail as full
	}
	return n + m, nil
}
