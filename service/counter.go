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

// CountResult is the answer to one CountRequest: the count after the call and the time left
// until its window ends, as CountWindow returns them.
type CountResult struct {
	Count int64
	Reset time.Duration
}

// BatchCounter is a WindowCounter that also counts many requests in one call: the Redis store
// sends them in one pipelined round trip, whatever their number.
type BatchCounter interface {
	WindowCounter
	// CountWindows counts reqs as calls of CountWindow one after the other, in order, would
	// (a counter named twice is charged twice, the second call seeing the first's count), and
	// writes their results to out, which must be as long as reqs. An invalid request fails the
	// whole batch before anything is counted. On any other error no result is returned, and
	// each counter is left as one of its calls would leave it on an error: unchanged or
	// charged; a batch is not atomic as a whole (neither is a request's set of CountWindow
	// calls).
	CountWindows(ctx context.Context, reqs []CountRequest, out []CountResult) error
}

// CountWindows counts reqs with c into out: in one call when c is a BatchCounter, else by
// calls of CountWindow one after the other, stopping at the first error.
func CountWindows(ctx context.Context, c WindowCounter, reqs []CountRequest, out []CountResult) error {
	if len(out) != len(reqs) {
		return errors.New("service: CountWindows: out and reqs differ in length")
	}
	if b, ok := c.(BatchCounter); ok {
		return b.CountWindows(ctx, reqs, out)
	}
	for _, r := range reqs {
		if err := r.Validate(); err != nil {
			return err
		}
	}
	for i, r := range reqs {
		n, reset, err := c.CountWindow(ctx, r)
		if err != nil {
			return err
		}
		out[i] = CountResult{Count: n, Reset: reset}
	}
	return nil
}
