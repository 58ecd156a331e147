package service

import (
	"context"
	"errors"
	"sync/atomic"

	"github.com/meshlimit/meshlimit/algorithms"
)

// FullFallback is a Store that decides in Local the keys its Store refuses for lack of memory
// (ErrStoreFull): with the Redis store, the new keys of a full Redis, which still decides the
// keys it holds exactly. A new client is then limited by this replica's memory (each replica
// counts on its own, so up to one quota per replica) instead of falling to its rule's
// failure_mode; Local bounds what a flood can take (the memory store's MaxKeys). Everything but
// Decide is the Store's. Stats counts the decisions made in Local.
type FullFallback struct {
	Store
	// Local decides what Store refuses as full: the memory store.
	Local Store

	fallbacks atomic.Int64
}

// Decide implements Store.
func (f *FullFallback) Decide(ctx context.Context, req Request) (algorithms.Decision, error) {
	d, err := f.Store.Decide(ctx, req)
	if !errors.Is(err, ErrStoreFull) {
		return d, err
	}
	f.fallbacks.Add(1)
	return f.Local.Decide(ctx, req)
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
