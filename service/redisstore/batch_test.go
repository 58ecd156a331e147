package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/algorithms"
	"github.com/meshlimit/meshlimit/internal/redistest"
	"github.com/meshlimit/meshlimit/service"
)

// batchLimit returns a random valid limit for a batch: any kind across scales (randomLimit), or
// a calendar fixed window of any unit at an offset of up to ±18 hours.
func batchLimit(r *rand.Rand) algorithms.Limit {
	if r.IntN(4) == 0 {
		return algorithms.Limit{Kind: algorithms.FixedWindow, Quota: 1 + r.Int64N(1000), Calendar: algorithms.Calendar{
			Unit:   algorithms.CalendarUnits[r.IntN(len(algorithms.CalendarUnits))],
			Offset: time.Duration(r.Int64N(2*18*60+1)-18*60) * time.Minute,
		}}
	}
	return randomLimit(r, algorithms.Kinds[r.IntN(len(algorithms.Kinds))])
}

// Every descriptor of a batch (its numbers passed as doubles, one reading of Redis TIME) is
// decided exactly as its own script decides it alone: random batches of every kind, quotas and
// windows at their bounds, calendars at negative and positive offsets, costs from 1 to past
// every quota (2^62), at given times near 0 and 2^52 µs and at Redis TIME, against the same calls
// one by one on keys of their own.
func TestABatchDecidesEveryDescriptorExactlyAsItsOwnScript(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	s := newStore(t, rs.Addr())
	ctx := context.Background()
	r := rand.New(rand.NewPCG(22, 22))
	costs := []int64{1, 2, 3, 1000, algorithms.MaxQuota, 1 << 62}
	decided := 0
	for round := range 300 {
		reqs := make([]service.Request, 2+r.IntN(15))
		var now time.Time
		switch r.IntN(4) {
		case 0:
			now = time.UnixMicro(r.Int64N(1000))
		case 1:
			now = time.UnixMicro(1<<52 - r.Int64N(1000))
		case 2:
			now = time.UnixMicro(1_700_000_000_000_000 + r.Int64N(1e12))
		}
		for i := range reqs {
			reqs[i] = service.Request{Key: fmt.Sprintf("%d/%d", round, i), Limit: batchLimit(r), Cost: costs[r.IntN(len(costs))], Now: now}
		}
		if now.IsZero() {
			// Redis TIME: one by one the calls read it apart, so the limits must not tell
			// microseconds apart: windows of an hour and more.
			for i := range reqs {
				if l := &reqs[i].Limit; l.Calendar == (algorithms.Calendar{}) && l.Window < time.Hour {
					if l.Window = time.Hour; l.Validate() != nil {
						*l = algorithms.Limit{Kind: l.Kind, Quota: 10, Window: time.Hour}
					}
				}
			}
		}
		out := make([]algorithms.Decision, len(reqs))
		n, err := s.DecideAll(ctx, reqs, out)
		require.NoError(t, err)
		for i, req := range reqs[:n] {
			req.Key = "alone " + req.Key
			want, err := s.Decide(ctx, req)
			require.NoError(t, err)
			if now.IsZero() {
				// Reset and the waits count from the call's own instant: equal to within the
				// microseconds between the two calls.
				for _, d := range []*time.Duration{&want.Reset, &want.RetryAfter, &want.EffectiveWindow, &out[i].Reset, &out[i].RetryAfter, &out[i].EffectiveWindow} {
					if *d != algorithms.RetryNever {
						*d = d.Round(time.Minute)
					}
				}
				// So does the time of the decision, which each reads from TIME.
				require.Positive(t, out[i].At)
				want.At, out[i].At = 0, 0
			}
			require.Equal(t, want, out[i], "round %d descriptor %d: %+v", round, i, req)
			decided++
		}
	}
	t.Logf("%d descriptors decided in batches as alone", decided)
}
