package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/algorithms"
	"github.com/meshlimit/meshlimit/internal/redistest"
	"github.com/meshlimit/meshlimit/service"
	"github.com/meshlimit/meshlimit/wire"
)

// The differential test: random traces (costs above 1 and above capacity, idle gaps, clock
// steps back, times near 0 and past 2^52 µs) go through package algorithms and through the
// Lua scripts on a real redis-server, and every decision must be identical to the
// microsecond. The kinds that settle also draw settles (refunds and over-runs beyond a capacity,
// reservations of this window and of earlier ones) between decisions, through Limit.Adjust and
// the settle scripts: the decisions that follow must still be identical. MESHLIMIT_DIFF_TRACES (traces per algorithm, default 200) and
// MESHLIMIT_DIFF_SEED make longer or other runs.

// traceStep is a decision of cost at nowUs, or, when delta is not 0, a settle of delta units for
// a reservation decided ageUs before.
type traceStep struct{ nowUs, cost, delta, ageUs int64 }

// randomLimit returns a valid limit of kind k, with quotas, windows and bursts drawn across
// scales: tiny and huge quotas, windows that quota does not divide, bursts below and above
// quota.
func randomLimit(r *rand.Rand, k algorithms.Kind) algorithms.Limit {
	for {
		l := algorithms.Limit{Kind: k}
		maxQ := algorithms.MaxQuota
		if k == algorithms.SlidingLog {
			maxQ = algorithms.MaxLogQuota
		}
		switch r.IntN(5) {
		case 0:
			l.Quota = 1 + r.Int64N(5)
		case 1:
			l.Quota = 1 + r.Int64N(100)
		case 2:
			l.Quota = 1 + r.Int64N(min(maxQ, 10_000))
		case 3:
			l.Quota = 1 + r.Int64N(maxQ)
		default:
			l.Quota = maxQ - r.Int64N(3)
		}
		switch r.IntN(5) {
		case 0: // a few ms, in µs: rarely a multiple of the quota
			l.Window = time.Millisecond + time.Duration(r.Int64N(5000))*time.Microsecond
		case 1:
			l.Window = time.Duration(1+r.Int64N(60_000)) * time.Millisecond
		case 2:
			l.Window = time.Duration(1+r.Int64N(int64(algorithms.MaxWindow/time.Microsecond))) * time.Microsecond
		case 3:
			l.Window = algorithms.MaxWindow - time.Duration(r.Int64N(1000))*time.Microsecond
		default:
			l.Window = []time.Duration{time.Millisecond, time.Second, time.Minute, time.Hour}[r.IntN(4)]
		}
		if k == algorithms.TokenBucket || k == algorithms.LeakyBucket {
			switch r.IntN(4) {
			case 0:
				l.Burst = 1 + r.Int64N(2*l.Quota)
			case 1:
				l.Burst = 1 + r.Int64N(algorithms.MaxQuota)
			case 2:
				l.Burst = 1 + r.Int64N(10)
			}
		}
		if l.Validate() == nil {
			return l
		}
	}
}

// randomTrace returns n steps for l: bursts at and above the rate, idle gaps beyond the
// window, clock steps back, and costs from 1 to twice the capacity.
func randomTrace(r *rand.Rand, l algorithms.Limit, n int) []traceStep {
	w := int64(l.Window / time.Microsecond)
	unit := max(w/l.Quota, 1)
	c := l.Capacity()
	var now int64
	switch r.IntN(10) {
	case 0:
		now = r.Int64N(2 * w) // near the epoch: steps back clamp at 0
	case 1:
		now = wire.MaxTimeUs - r.Int64N(3*w) // near 2^52: steps forward clamp there
	default:
		now = 1_700_000_000_000_000 + r.Int64N(1e15)
	}
	steps := make([]traceStep, n)
	for i := range steps {
		switch p := r.IntN(100); {
		case p < 35:
			now += r.Int64N(2*unit + 1)
		case p < 55:
		case p < 70:
			now += r.Int64N(unit/4 + 1)
		case p < 78:
			now += r.Int64N(w + 1)
		case p < 88:
			now += w + r.Int64N(2*w)
		default:
			now -= r.Int64N(w + 1)
		}
		now = min(now, wire.MaxTimeUs+4*w)
		cost := int64(1)
		switch p := r.IntN(100); {
		case p < 15:
			cost = 1 + r.Int64N(c)
		case p < 25:
			cost = 1 + r.Int64N(min(c, 10))
		case p < 28:
			cost = c + 1 + r.Int64N(c)
		case p < 32:
			cost = max(c-r.Int64N(3), 1)
		}
		steps[i] = traceStep{nowUs: now, cost: cost}
		if l.Kind.Settles() && r.IntN(100) < 15 {
			steps[i].delta = 1 + r.Int64N(2*c)
			if r.IntN(4) == 0 { // past one capacity, up to past the debt's ceiling
				steps[i].delta = 1 + r.Int64N(80*c)
			}
			if r.IntN(2) == 0 {
				steps[i].delta = -steps[i].delta
			}
			steps[i].ageUs = r.Int64N(2*w + 1)
		}
	}
	return steps
}

func envInt(name string, def int64) int64 {
	if v, err := strconv.ParseInt(os.Getenv(name), 10, 64); err == nil {
		return v
	}
	return def
}

func TestLuaMatchesAlgorithms(t *testing.T) {
	t.Parallel()
	store := newStore(t, redistest.Start(t).Addr())
	traces := int(envInt("MESHLIMIT_DIFF_TRACES", 200))
	seed := uint64(envInt("MESHLIMIT_DIFF_SEED", 20251129))
	const steps = 60
	t.Logf("seed %d, %d traces of %d steps per algorithm", seed, traces, steps)

	var decisions, denied atomic.Int64
	for _, k := range algorithms.Kinds {
		t.Run(k.String(), func(t *testing.T) {
			type job struct {
				id    int
				limit algorithms.Limit
				steps []traceStep
			}
			jobs := make(chan job)
			var (
				wg       sync.WaitGroup
				mu       sync.Mutex
				mismatch string
				failed   atomic.Bool
			)
			for range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for j := range jobs {
						if failed.Load() {
							continue
						}
						if msg := runDiffTrace(store, k, j.id, j.limit, j.steps, &decisions, &denied); msg != "" {
							mu.Lock()
							if mismatch == "" {
								mismatch = msg
							}
							mu.Unlock()
							failed.Store(true)
						}
					}
				}()
			}
			r := rand.New(rand.NewPCG(seed, uint64(k)))
			for i := range traces {
				l := randomLimit(r, k)
				jobs <- job{i, l, randomTrace(r, l, steps)}
			}
			close(jobs)
			wg.Wait()
			require.Empty(t, mismatch)
		})
	}
	t.Logf("%d decisions identical (%d denied)", decisions.Load(), denied.Load())
}

// runDiffTrace runs one trace through both implementations and describes the first
// difference, or returns "".
func runDiffTrace(store *Store, k algorithms.Kind, id int, l algorithms.Limit, steps []traceStep, decisions, denied *atomic.Int64) string {
	ctx := context.Background()
	key := fmt.Sprintf("diff-%v-%d", k, id)
	var state []byte
	for i, s := range steps {
		if s.delta != 0 {
			var msg string
			if state, msg = diffSettle(store, key, l, state, s); msg != "" {
				return fmt.Sprintf("trace %d step %d: %s", id, i, msg)
			}
			continue
		}
		next, want, err := l.Decide(state, s.nowUs*1000, s.cost, nil)
		if err != nil {
			return fmt.Sprintf("trace %d step %d: Go Decide: %v", id, i, err)
		}
		state = next
		// A long expiry: the trace's clock is not Redis's, so the production TTL (relative
		// to Redis time) would expire keys the trace still needs. TestRedisTTL checks it.
		got, err := store.decide(ctx, service.Request{Key: key, Limit: l, Cost: s.cost, Now: time.UnixMicro(s.nowUs)}, int64(time.Hour/time.Millisecond))
		if err != nil {
			return fmt.Sprintf("trace %d step %d: Redis: %v", id, i, err)
		}
		if got.At != min(max(s.nowUs, 0), wire.MaxTimeUs)*int64(time.Microsecond) {
			return fmt.Sprintf("trace %d step %d: Redis decided at %d ns, not at now_us %d", id, i, got.At, s.nowUs)
		}
		if got.At = 0; got != want {
			return fmt.Sprintf("trace %d step %d of %+v: at %d µs cost %d:\n  Go:  %+v\n  Lua: %+v\n  steps so far: %v",
				id, i, l, s.nowUs, s.cost, want, got, steps[:i+1])
		}
		decisions.Add(1)
		if !want.Allowed {
			denied.Add(1)
		}
	}
	return ""
}

// diffSettle applies settle step s to both implementations and returns Go's next state; the units
// each settle applied (given back, or charged) must agree too.
func diffSettle(store *Store, key string, l algorithms.Limit, state []byte, s traceStep) ([]byte, string) {
	reservedUs := min(max(s.nowUs, 0), wire.MaxTimeUs) - s.ageUs // the script's reservation time
	next, want, err := l.Settle(state, s.nowUs*1000, reservedUs*1000, s.delta, nil)
	if err != nil {
		return nil, fmt.Sprintf("Go Settle: %v", err)
	}
	req := service.SettleRequest{Key: key, Limit: l, Delta: s.delta, Age: time.Duration(s.ageUs) * time.Microsecond, Now: time.UnixMicro(s.nowUs)}
	got, err := store.settleAt(context.Background(), req, int64(time.Hour/time.Millisecond))
	if err != nil {
		return nil, fmt.Sprintf("Redis settle: %v", err)
	}
	if got != want {
		return nil, fmt.Sprintf("a settle of %d at %d µs applied %d in Redis, %d in Go", s.delta, s.nowUs, got, want)
	}
	return next, ""
}
