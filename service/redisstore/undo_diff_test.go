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
	"github.com/meshlimit/meshlimit/wire"
)

// The differential test of undo: random traces of decisions (as TestLuaMatchesAlgorithms draws
// them) in which admitted requests are, now and then, given back later (algorithms.Limit.Undo
// and the store's undo: the settle script of a kind that settles, the undo script of another),
// from this window and from earlier ones. The decisions that follow must stay identical.

func TestLuaUndoMatchesAlgorithmsForEveryKind(t *testing.T) {
	t.Parallel()
	store := newStore(t, redistest.Start(t).Addr())
	traces := int(envInt("MESHLIMIT_DIFF_TRACES", 200))
	seed := uint64(envInt("MESHLIMIT_DIFF_SEED", 20261202))
	var undone int
	for _, k := range algorithms.Kinds {
		t.Run(k.String(), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, uint64(k)))
			for i := range traces {
				l := randomLimit(r, k)
				steps := randomTrace(r, l, 60)
				n, msg := runUndoTrace(store, r, k, i, l, steps)
				require.Empty(t, msg)
				undone += n
			}
		})
	}
	require.Positive(t, undone)
	t.Logf("%d admissions given back", undone)
}

// admission is a decision the trace admitted: its time, the time the script reported (the
// decision's At, in µs), and its cost.
type admission struct{ nowUs, atUs, cost int64 }

// runUndoTrace runs the decisions of steps through both implementations, giving back a pending
// admission at about one step in four, and describes the first difference, or returns "".
func runUndoTrace(store *Store, r *rand.Rand, k algorithms.Kind, id int, l algorithms.Limit, steps []traceStep) (int, string) {
	ctx := context.Background()
	key := fmt.Sprintf("undo-%v-%d", k, id)
	var state []byte
	var pending []admission
	undone := 0
	for i, s := range steps {
		if len(pending) > 0 && r.IntN(4) == 0 {
			j := r.IntN(len(pending))
			a := pending[j]
			pending = append(pending[:j], pending[j+1:]...)
			nowUs := max(s.nowUs, a.nowUs) // an undo comes after its admission
			atUs := a.atUs                 // named as the filter names it, by the decision's time
			if r.IntN(2) == 0 {
				atUs = 0 // by its age, as from a service before at_us
			}
			var msg string
			if state, msg = diffUndo(store, key, l, state, nowUs, nowUs-a.nowUs, atUs, a.cost); msg != "" {
				return undone, fmt.Sprintf("trace %d step %d: %s", id, i, msg)
			}
			undone++
		}
		next, want, err := l.Decide(state, s.nowUs*1000, s.cost, nil)
		if err != nil {
			return undone, fmt.Sprintf("trace %d step %d: Go Decide: %v", id, i, err)
		}
		state = next
		got, err := store.decide(ctx, service.Request{Key: key, Limit: l, Cost: s.cost, Now: time.UnixMicro(s.nowUs)}, int64(time.Hour/time.Millisecond))
		if err != nil {
			return undone, fmt.Sprintf("trace %d step %d: Redis: %v", id, i, err)
		}
		atUs := got.At / int64(time.Microsecond)
		if got.At = 0; got != want || atUs != min(max(s.nowUs, 0), wire.MaxTimeUs) {
			return undone, fmt.Sprintf("trace %d step %d of %+v: at %d µs cost %d:\n  Go:  %+v\n  Lua: %+v at %d µs", id, i, l, s.nowUs, s.cost, want, got, atUs)
		}
		if want.Allowed {
			pending = append(pending, admission{s.nowUs, atUs, s.cost})
		}
	}
	return undone, ""
}

// diffUndo gives back cost units admitted ageUs before nowUs (or, when atUs > 0, at atUs: the
// decision's time) in both implementations and returns Go's next state.
func diffUndo(store *Store, key string, l algorithms.Limit, state []byte, nowUs, ageUs, atUs, cost int64) ([]byte, string) {
	takenUs := min(max(nowUs, 0), wire.MaxTimeUs) - ageUs // the script's admission time
	req := service.SettleRequest{Key: key, Limit: l, Delta: -cost, Age: time.Duration(ageUs) * time.Microsecond, Now: time.UnixMicro(nowUs), Undo: true}
	if atUs > 0 {
		takenUs, req.Age, req.At = atUs, 0, time.UnixMicro(atUs)
	}
	next, want, err := l.GiveBack(state, nowUs*1000, takenUs*1000, cost, atUs > 0, nil)
	if err != nil {
		return nil, fmt.Sprintf("Go Undo: %v", err)
	}
	got, err := store.settleAt(context.Background(), req, int64(time.Hour/time.Millisecond))
	if err != nil {
		return nil, fmt.Sprintf("Redis undo: %v", err)
	}
	if got != want {
		return nil, fmt.Sprintf("an undo of %d units at %d µs gave back %d in Redis, %d in Go", cost, takenUs, got, want)
	}
	return next, ""
}
