package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
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

// The sweep of the runs undos empty (lua/sliding_log_undo.lua) moves runs across the ring, and a
// gap between them, while decisions append, drop expired runs and search: long traces of
// decisions, with about one undo in four of a random pending admission, decide and give back
// exactly as package algorithms, whatever the window does to the ring (it wraps when runs
// expire), and the ring stays within twice the quota's slots.
func TestLongSlidingLogTracesWithUndosDecideAsTheReferenceWhileTheSweepMovesRuns(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	store := newStore(t, rs.Addr())
	cases := []struct {
		name   string
		quota  int64
		window time.Duration
		stepUs int64
	}{
		{"a log whose window outlasts the trace", 200, time.Hour, 1000},
		{"a log whose runs expire while it sweeps, so that the ring wraps", 100, 300 * time.Millisecond, 1000},
		{"a small log that undos empty often", 40, 200 * time.Millisecond, 3000},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(20261203, uint64(i)))
			l := algorithms.Limit{Kind: algorithms.SlidingLog, Quota: c.quota, Window: c.window}
			steps := make([]traceStep, 3000)
			now := int64(1_800_000_000_000_000)
			for j := range steps {
				now += 1 + r.Int64N(2*c.stepUs)
				steps[j] = traceStep{nowUs: now, cost: 1 + r.Int64N(2)}
			}
			undone, msg := runUndoTrace(store, r, algorithms.SlidingLog, 1000+i, l, steps)
			require.Empty(t, msg)
			assert.Positive(t, undone)
			n, err := rs.Do("STRLEN", store.stateKey(l.Kind, fmt.Sprintf("undo-%v-%d", algorithms.SlidingLog, 1000+i)))
			require.NoError(t, err)
			size, err := strconv.Atoi(n)
			require.NoError(t, err)
			assert.LessOrEqual(t, size, ringBytes(int(2*c.quota))+8*int((2*c.quota+31)/32+1))
		})
	}
}
