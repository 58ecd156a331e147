package service

import (
	"context"
	"strings"
	"time"
)

// StoreReady pings store, bounded by timeout (the service's -timeout: a ping that reconnects
// to Redis makes every decision wait for that reconnect, so it must not outlast a decision's
// deadline), and says whether a replica on it
// is ready to serve, for every readiness answer of the service (/readyz, gRPC health) to agree:
// ready when the ping succeeds, and when its only failure is ErrStoreFull (full says so): a
// full store is shared by every replica and still decides the keys it holds, so no replica
// leaves the Service for it. err is the ping's failure, nil when it succeeded.
func StoreReady(ctx context.Context, store Store, timeout time.Duration) (ready, full bool, err error) {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err = store.Ping(ctx); err == nil {
		return true, false, nil
	}
	if onlyFull(err) {
		return true, true, err
	}
	return false, false, err
}

// bearerToken returns the token of an "Authorization: Bearer <token>" value, the scheme
// matched case-insensitively (RFC 9110, section 11.1), or "" for another scheme.
func bearerToken(v string) string {
	const scheme = "bearer "
	if len(v) < len(scheme) || !strings.EqualFold(v[:len(scheme)], scheme) {
		return ""
	}
	return v[len(scheme):]
}
