package service

import (
	"context"
	"time"
)

// StoreReady pings store, bounded by timeout (at least 1 s), and says whether a replica on it
// is ready to serve, for every readiness answer of the service (/readyz, gRPC health) to agree:
// ready when the ping succeeds, and when its only failure is ErrStoreFull (full says so): a
// full store is shared by every replica and still decides the keys it holds, so no replica
// leaves the Service for it. err is the ping's failure, nil when it succeeded.
func StoreReady(ctx context.Context, store Store, timeout time.Duration) (ready, full bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, max(timeout, time.Second))
	defer cancel()
	if err = store.Ping(ctx); err == nil {
		return true, false, nil
	}
	if onlyFull(err) {
		return true, true, err
	}
	return false, false, err
}
