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

// testBatchCounters checks CountWindows: a batch counts as its calls of CountWindow one after
// the other do, shared counters, reads and charges past MaxQuota included.
func testBatchCounters(t *testing.T, s service.Store) {
	ctx := context.Background()
	t0 := time.Unix(1_700_000_080, 500_000_000)
	_, ok := s.(service.BatchCounter)
	require.True(t, ok, "the store counts a batch in one call (service.BatchCounter)")
	batch := func(reqs ...service.CountRequest) []service.CountResult {
		t.Helper()
		out := make([]service.CountResult, len(reqs))
		require.NoError(t, service.CountWindows(ctx, s, reqs, out))
		return out
	}
	t.Run("a counter named twice in a batch is charged in request order", func(t *testing.T) {
		out := batch(
			service.CountRequest{Key: "b:a", Window: time.Minute, Hits: 1, Now: t0},
			service.CountRequest{Key: "b:b", Window: time.Minute, Hits: 4, Now: t0},
			service.CountRequest{Key: "b:a", Window: time.Minute, Hits: 5, Now: t0},
			service.CountRequest{Key: "b:a", Window: time.Minute, Hits: 0, Now: t0},
			service.CountRequest{Key: "b:c", Window: time.Minute, Hits: 0, Now: t0},
		)
		left := 19500 * time.Millisecond
		assert.Equal(t, []service.CountResult{r(1, left), r(4, left), r(6, left), r(6, left), r(0, 0)}, out)
	})
	t.Run("a batch whose charges pass MaxQuota counts as its calls one after the other", func(t *testing.T) {
		t1 := time.Unix(1_700_000_000, 0)
		w, left := time.Hour, time.Hour-time.Duration(t1.Unix()%3600)*time.Second
		batch(service.CountRequest{Key: "b:full", Window: w, Hits: algorithms.MaxQuota - 10, Now: t1})
		out := batch(
			service.CountRequest{Key: "b:full", Window: w, Hits: 3, Now: t1},
			service.CountRequest{Key: "b:other", Window: w, Hits: 1, Now: t1},
			service.CountRequest{Key: "b:full", Window: w, Hits: 8, Now: t1},
			service.CountRequest{Key: "b:full", Window: w, Hits: 0, Now: t1},
			service.CountRequest{Key: "b:full", Window: w, Hits: 7, Now: t1},
			service.CountRequest{Key: "b:full", Window: w, Hits: 1, Now: t1},
		)
		m := algorithms.MaxQuota
		assert.Equal(t, []service.CountResult{r(m-7, left), r(1, left), r(m-7, left), r(m-7, left), r(m, left), r(m, left)}, out)
		n, _, err := s.CountWindow(ctx, service.CountRequest{Key: "b:full", Window: w, Hits: 0, Now: t1})
		require.NoError(t, err)
		assert.Equal(t, m, n, "the charges that did not fit are not kept")
	})
	t.Run("random batches count as the same calls one after the other", func(t *testing.T) {
		rng := rand.New(rand.NewPCG(22, 16))
		windows := []time.Duration{time.Second, time.Minute, time.Hour}
		for round := range 20 {
			reqs := make([]service.CountRequest, 1+rng.IntN(16))
			for i := range reqs {
				hits := int64(rng.IntN(4))
				if rng.IntN(8) == 0 {
					hits = algorithms.MaxQuota / 2
				}
				reqs[i] = service.CountRequest{Key: string(rune('a' + rng.IntN(4))), Window: windows[rng.IntN(3)], Hits: hits,
					Now: t0.Add(time.Duration(round) * 700 * time.Millisecond)}
			}
			seq := make([]service.CountResult, len(reqs))
			for i, r := range reqs {
				r.Key = "seq:" + r.Key
				n, reset, err := s.CountWindow(ctx, r)
				require.NoError(t, err)
				seq[i] = service.CountResult{Count: n, Reset: reset}
			}
			for i := range reqs {
				reqs[i].Key = "bat:" + reqs[i].Key
			}
			require.Equal(t, seq, batch(reqs...), "round %d: %+v", round, reqs)
		}
	})
	t.Run("an invalid request refuses the whole batch before anything is counted", func(t *testing.T) {
		reqs := []service.CountRequest{{Key: "b:first", Window: time.Minute, Hits: 1, Now: t0}, {Key: "b:neg", Window: time.Minute, Hits: -1, Now: t0}}
		require.Error(t, service.CountWindows(ctx, s, reqs, make([]service.CountResult, 2)))
		n, _, err := s.CountWindow(ctx, service.CountRequest{Key: "b:first", Window: time.Minute, Now: t0})
		require.NoError(t, err)
		assert.Zero(t, n, "the valid request before it was not counted")
	})
}

// r is a CountResult.
func r(count int64, reset time.Duration) service.CountResult {
	return service.CountResult{Count: count, Reset: reset}
}
