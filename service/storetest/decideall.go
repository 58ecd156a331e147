package storetest

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/algorithms"
	"github.com/meshlimit/meshlimit/service"
)

// testDecideAll checks service.DecideAll on the store (its batch when it is a
// service.BatchDecider): a batch decides as its calls of Decide one after the other, stopping
// after the first denial, and charges nothing after it.
func testDecideAll(t *testing.T, s service.Store) {
	ctx := context.Background()
	t0 := time.Unix(1_700_000_022, 250_000_000)
	bucket := algorithms.Limit{Kind: algorithms.TokenBucket, Quota: 2, Window: time.Hour}
	all := func(reqs ...service.Request) (int, []algorithms.Decision) {
		t.Helper()
		out := make([]algorithms.Decision, len(reqs))
		n, err := service.DecideAll(ctx, s, reqs, out)
		require.NoError(t, err)
		return n, out[:n]
	}
	t.Run("a batch stops after the first denial and charges nothing after it", func(t *testing.T) {
		_, err := s.Decide(ctx, service.Request{Key: "d:full", Limit: bucket, Cost: 2, Now: t0})
		require.NoError(t, err)
		n, out := all(
			service.Request{Key: "d:before", Limit: bucket, Cost: 1, Now: t0},
			service.Request{Key: "d:full", Limit: bucket, Cost: 1, Now: t0},
			service.Request{Key: "d:after", Limit: bucket, Cost: 1, Now: t0},
		)
		require.Equal(t, 2, n)
		assert.True(t, out[0].Allowed)
		assert.False(t, out[1].Allowed)
		d, err := s.Decide(ctx, service.Request{Key: "d:after", Limit: bucket, Cost: 2, Now: t0})
		require.NoError(t, err)
		assert.True(t, d.Allowed, "the request after the denial was not charged")
	})
	t.Run("random batches of every algorithm decide as the same calls one after the other", func(t *testing.T) {
		rng := rand.New(rand.NewPCG(22, 4))
		for round := range 30 {
			reqs := make([]service.Request, 1+rng.IntN(16))
			now := t0.Add(time.Duration(round) * 90 * time.Second)
			for i := range reqs {
				reqs[i] = service.Request{Key: string(rune('a' + rng.IntN(4))), Limit: limits[rng.IntN(len(limits))],
					Cost: 1 + int64(rng.IntN(3)), Now: now}
			}
			var seq []algorithms.Decision
			for _, r := range reqs {
				r.Key = "dseq:" + r.Key
				d, err := s.Decide(ctx, r)
				require.NoError(t, err)
				seq = append(seq, d)
				if !d.Allowed {
					break
				}
			}
			for i := range reqs {
				reqs[i].Key = "dbat:" + reqs[i].Key
			}
			n, out := all(reqs...)
			require.Equal(t, len(seq), n, "round %d: %+v", round, reqs)
			require.Equal(t, seq, out, "round %d: %+v", round, reqs)
		}
	})
	t.Run("an invalid request refuses the whole batch before anything is decided", func(t *testing.T) {
		reqs := []service.Request{{Key: "d:first", Limit: bucket, Cost: 1, Now: t0}, {Key: "d:bad", Limit: bucket, Cost: 0, Now: t0}}
		_, err := service.DecideAll(ctx, s, reqs, make([]algorithms.Decision, 2))
		require.Error(t, err)
		d, err := s.Decide(ctx, service.Request{Key: "d:first", Limit: bucket, Cost: 2, Now: t0})
		require.NoError(t, err)
		assert.True(t, d.Allowed, "the valid request before it was not charged")
	})
}
