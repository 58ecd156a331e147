package service

import (
	"context"
	"strings"
	"sync"

	"github.com/meshlimit/meshlimit/wire"
)

// resetRing is the memory store's reset log: the last ResetLogSize entries in a ring. Its zero
// value is an empty log at position 1.
type resetRing struct {
	mu      sync.Mutex
	entries [ResetLogSize]wire.Reset
	n       int    // entries held
	latest  uint64 // the last position; 0 stands for the origin, 1
}

// AppendResets implements ResetLog.
func (s *MemoryStore) AppendResets(ctx context.Context, keys []string) (uint64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	r := &s.resets
	r.mu.Lock()
	defer r.mu.Unlock()
	r.latest = max(r.latest, 1)
	for _, k := range keys {
		r.latest++
		r.entries[r.latest%ResetLogSize] = wire.Reset{Seq: r.latest, Key: k}
		r.n = min(r.n+1, ResetLogSize)
	}
	return r.latest, nil
}

// ReadResets implements ResetLog.
func (s *MemoryStore) ReadResets(ctx context.Context, since uint64, prefix string, limit int) (ResetPage, error) {
	if err := ctx.Err(); err != nil {
		return ResetPage{}, err
	}
	r := &s.resets
	r.mu.Lock()
	defer r.mu.Unlock()
	latest := max(r.latest, 1)
	p := ResetPage{Latest: latest, Oldest: latest + 1 - uint64(r.n)}
	for seq := max(since+1, p.Oldest); seq <= latest && limit > 0; seq++ {
		e := r.entries[seq%ResetLogSize]
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
