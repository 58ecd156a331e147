package memstore

import (
	"context"
	"strings"
	"sync"

	"github.com/meshlimit/meshlimit/service"
	"github.com/meshlimit/meshlimit/wire"
)

// resetRing is the store's reset log: the last service.ResetLogSize entries in a ring. Its zero
// value is an empty log at position 1.
type resetRing struct {
	mu      sync.Mutex
	entries [service.ResetLogSize]wire.Reset
	n       int    // entries held
	latest  uint64 // the last position; 0 stands for the origin, 1
}

// AppendResets implements service.Store.
func (s *Store) AppendResets(ctx context.Context, keys []string) (uint64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	r := &s.resets
	r.mu.Lock()
	defer r.mu.Unlock()
	r.latest = max(r.latest, 1)
	for _, k := range keys {
		r.latest++
		r.entries[r.latest%service.ResetLogSize] = wire.Reset{Seq: r.latest, Key: k}
		r.n = min(r.n+1, service.ResetLogSize)
	}
	return r.latest, nil
}

// ReadResets implements service.Store.
func (s *Store) ReadResets(ctx context.Context, since uint64, prefix string, limit int) (service.ResetPage, error) {
	if err := ctx.Err(); err != nil {
		return service.ResetPage{}, err
	}
	r := &s.resets
	r.mu.Lock()
	defer r.mu.Unlock()
	latest := max(r.latest, 1)
	p := service.ResetPage{Latest: latest, Oldest: latest + 1 - uint64(r.n)}
	for seq := max(since+1, p.Oldest); seq <= latest && limit > 0; seq++ {
		e := r.entries[seq%service.ResetLogSize]
		if !strings.HasPrefix(e.Key, prefix) {
			continue
		}
		if len(p.Entries) == limit {
			p.More = true
			break
		}
		p.Entries = append(p.Entries, e)
	}
	return p, nil
}
