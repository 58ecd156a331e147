package storetest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/algorithms"
	"github.com/meshlimit/meshlimit/service"
)

// logAdmission is an admission of a sliding log the trace may undo: its time (the decision's At),
// its cost, and the units given back of it so far.
type logAdmission struct {
	at         time.Time
	cost, back int64
}

// testSlidingLogUndos checks a sliding log's undos on random traces of decisions and undos
// against algorithms.Limit (the reference both stores follow, so the stores agree): every
// decision answers as the reference's, and every undo gives back the reference's units, never
// more than its admission took nor twice (undos of runs already expired, of times no decision
// had, repeated undos, and undos asking for more than the admission took), 0 for an expired
// admission or an unknown time; an undo by age (from a filter before at_us) gives back from the
// first run at or after its time. The logs hold a few hundred runs, so that an undo reaches runs
// whole blocks before the newest, in a ring that wraps and grows.
func testSlidingLogUndos(t *testing.T, s service.Store) {
	ctx := context.Background()
	// An hour's window, so that Redis's TTL (real time) never ends a log while a trace runs.
	l := algorithms.Limit{Kind: algorithms.SlidingLog, Quota: 300, Window: time.Hour}
	for trace := range 4 {
		t.Run(fmt.Sprintf("trace %d of a sliding log's decisions and undos agrees with the reference", trace), func(t *testing.T) {
			r := rand.New(rand.NewPCG(20261203, uint64(trace)))
			key := fmt.Sprintf("sliding log undos %d", trace)
			now := time.Unix(1_900_000_000, 0)
			var state []byte
			var admitted []*logAdmission
			var last *logAdmission // the admission undone last
			undos, given := 0, int64(0)
			for step := range 700 {
				now = now.Add(2*time.Microsecond + time.Duration(r.IntN(27_000_000))*time.Microsecond) // decisions at least 2 µs apart
				if r.IntN(150) == 0 {
					now = now.Add(l.Window / 2) // half of the log expires
				}
				if len(admitted) > 0 && r.IntN(3) == 0 {
					a, unknown, byAge := admitted[len(admitted)-1], false, false
					switch c := r.IntN(20); {
					case c < 10:
						a = admitted[r.IntN(len(admitted))] // expired, undone, or live
					case c < 13 && last != nil:
						a = last // repeated
					case c < 16:
						unknown = true // a time no decision had
					case c < 18:
						byAge = true // as from a filter before at_us: the first run at or after now - age
					}
					at, cost := a.at, a.cost+int64(r.IntN(2)) // at times more than it took
					if unknown {
						at = at.Add(time.Microsecond)
					}
					req := service.SettleRequest{Key: key, Limit: l, Delta: -cost, At: at, Now: now, Undo: true}
					if byAge {
						req.At, req.Age = time.Time{}, now.Sub(at)
					}
					next, want, err := l.GiveBack(state, now.UnixNano(), at.UnixNano(), cost, !byAge, nil)
					require.NoError(t, err)
					state = next
					got, err := s.Settle(ctx, req)
					require.NoError(t, err)
					require.Equal(t, want, got, "step %d: the undo of %d at %v gives back the reference's units", step, cost, at)
					require.LessOrEqual(t, got, cost, "step %d: never more than asked", step)
					switch {
					case byAge: // it may reach a later admission's run, once this one's is empty
					case unknown:
						require.Zero(t, got, "step %d: a time no decision had gives nothing back", step)
					case !at.After(now.Add(-l.Window)):
						require.Zero(t, got, "step %d: an expired admission gives nothing back", step)
					default:
						require.LessOrEqual(t, a.back+got, a.cost, "step %d: never more than the admission took, never twice", step)
						a.back += got
						last = a
					}
					undos++
					given += got
				}
				cost := int64(1 + r.IntN(2))
				next, want, err := l.Decide(state, now.UnixNano(), cost, nil)
				require.NoError(t, err)
				state = next
				d, err := s.Decide(ctx, service.Request{Key: key, Limit: l, Cost: cost, Now: now})
				require.NoError(t, err)
				require.Equal(t, now.UnixNano(), d.At, "step %d", step)
				d.At = 0
				require.Equal(t, want, d, "step %d: the decision of %d at %v", step, cost, now)
				if d.Allowed {
					admitted = append(admitted, &logAdmission{at: now, cost: cost})
				}
				if step%25 == 0 { // the key as Inspect reads it (offsets and all)
					want, err := service.PeekState(l, state, now)
					require.NoError(t, err)
					got, err := s.Inspect(ctx, service.Request{Key: key, Limit: l, Cost: 1, Now: now})
					require.NoError(t, err)
					require.Equal(t, want, got, "step %d: Inspect", step)
				}
			}
			assert.Positive(t, given, "some undos gave units back")
			t.Logf("%d undos gave back %d units", undos, given)
		})
	}
}
