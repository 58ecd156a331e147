package service

import (
	"context"
	"errors"
	"time"

	"github.com/meshlimit/meshlimit/algorithms"
)

// WindowCounter keeps envoyproxy/ratelimit's counters (package rls): counts of hits in fixed
// windows, with no quota of their own.
type WindowCounter interface {
	// CountWindow adds req.Hits to the counter named req.Key in the window of length req.Window
	// that contains req.Now (windows aligned to multiples of the window since the Unix epoch; the
	// zero Now means the store's clock), and returns the count after the call and the time left
	// until that window ends (0 when the count is 0).
	//
	// Unlike a limit, the counter has no quota: every call is charged, whatever the count, so
	// that a caller can compare the count to a limit that may change between calls without
	// losing the counts (the limit is not part of the counter's identity). Hits 0 reads the count
	// without charging. The counter behaves as a FixedWindow of quota algorithms.MaxQuota
	// (CountRequest.Limit): a charge that would take it past MaxQuota is not counted.
	CountWindow(ctx context.Context, req CountRequest) (count int64, reset time.Duration, err error)
}

// CountRequest is one call of a window counter (WindowCounter.CountWindow).
type CountRequest struct {
	Key    string
	Window time.Duration
	// Hits is the number of hits to count, >= 0; 0 reads the count.
	Hits int64
	// Now is the time of the call; the zero Time means the store's clock, as for Request.
	Now time.Time
}

// Limit is the limit the counter behaves as: a FixedWindow of quota algorithms.MaxQuota.
func (r CountRequest) Limit() algorithms.Limit {
	return algorithms.Limit{Kind: algorithms.FixedWindow, Quota: algorithms.MaxQuota, Window: r.Window}
}

// Validate reports what is wrong with r.
func (r CountRequest) Validate() error {
	if r.Hits < 0 {
		return errors.New("service: hits must be >= 0")
	}
	return Request{Key: r.Key, Limit: r.Limit(), Cost: 1}.Validate()
}
