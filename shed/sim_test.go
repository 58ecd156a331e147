package shed_test

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/internal/shedsim"
	"github.com/meshlimit/meshlimit/shed"
)

const (
	upstreamBase = 20 * time.Millisecond
	tick         = 100 * time.Millisecond
)

// phase is a stretch of a simulation with one true capacity.
type phase struct {
	from, to time.Duration
	k        int64
}

// limitsIn returns the limits of the ticks in [from, to) outside probes, and the time from
// `from` to the first tick whose limit is within [lo, hi].
func limitsIn(ticks []shedsim.Tick, from, to time.Duration, lo, hi float64) (limits []int64, settle time.Duration) {
	settle = -1
	for _, tk := range ticks {
		if tk.At <= from || tk.At > to || tk.Step.Action == shed.Probe {
			continue
		}
		l := float64(tk.Step.Limit)
		if settle < 0 && l >= lo && l <= hi {
			settle = tk.At - from
		}
		limits = append(limits, tk.Step.Limit)
	}
	return limits, settle
}

func TestTheAdaptiveLimitConvergesNearTheTrueCapacityAndFollowsItsChanges(t *testing.T) {
	phases := []phase{{0, 40 * time.Second, 50}, {40 * time.Second, 80 * time.Second, 100}, {80 * time.Second, 120 * time.Second, 25}}
	one, err := shed.NewPolicy([]shed.Class{{Name: "all"}}, "all")
	require.NoError(t, err)
	for _, seed := range []uint64{1, 2, 3} {
		cfg := shedsim.Config{
			Gradient: shed.DefaultGradient(), Policy: one, Base: upstreamBase, Noise: 0.1,
			Offered: []shedsim.Offer{{Class: 0, PerSecond: 10_000}}, // twice what K = 100 serves
			Tick:    tick, Span: 120 * time.Second, Seed: seed,
		}
		for _, p := range phases {
			cfg.K = append(cfg.K, shedsim.Change{At: p.from, K: p.k})
		}
		ticks := shedsim.Run(cfg)
		for _, p := range phases {
			k := float64(p.k)
			_, settle := limitsIn(ticks, p.from, p.to, 0.7*k, 1.3*k)
			require.GreaterOrEqual(t, settle, time.Duration(0), "seed %d, K %d: the limit never reached [0.7K, 1.3K]", seed, p.k)
			assert.LessOrEqual(t, settle, 10*time.Second, "seed %d, K %d: settles within 100 intervals", seed, p.k)
			settled, _ := limitsIn(ticks, p.from+settle+10*time.Second, p.to, 0, 0)
			require.NotEmpty(t, settled)
			lo, hi := slices.Min(settled), slices.Max(settled)
			assert.GreaterOrEqual(t, float64(lo), 0.7*k, "seed %d, K %d: the limit stays within [0.7K, 1.3K] from 10 s after it settles", seed, p.k)
			assert.LessOrEqual(t, float64(hi), 1.3*k, "seed %d, K %d: the limit stays within [0.7K, 1.3K] from 10 s after it settles", seed, p.k)
			t.Logf("seed %d, K %3d: settled in %v; then limit %d..%d (median %d) over %d intervals",
				seed, p.k, settle, lo, hi, median(settled), len(settled))
		}
	}
}

func median(v []int64) int64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

func TestUnderOverloadSheddableIsShedFirstAndCriticalKeepsItsReserve(t *testing.T) {
	p := shed.DefaultPolicy()
	const critical, normal, sheddable = 0, 1, 2
	reserveChecks := 0
	onDecision := func(before shed.State, capacity int64, class int, d shed.Decision) {
		after := before.Total()
		if d.Admitted {
			after++
		}
		lower := int64(before.InFlight[normal] + before.InFlight[sheddable])
		reserve := capacity - p.Threshold(capacity, normal)
		if d.Admitted && after > capacity && (class != critical || after > lower+reserve) {
			t.Fatalf("admitted class %d to %d in flight over capacity %d", class, after, capacity)
		}
		for higher := range d.Class {
			if _, dh := p.Admit(before, capacity, higher); d.Admitted && !dh.Admitted {
				t.Fatalf("class %d shed while class %d is admitted (%v, capacity %d)", higher, d.Class, before.InFlight, capacity)
			}
		}
		if class == critical && int64(before.InFlight[critical]) < reserve {
			reserveChecks++
			if !d.Admitted {
				t.Fatalf("critical shed with %d of its reserve %d in use (%v, capacity %d)", before.InFlight[critical], reserve, before.InFlight, capacity)
			}
		}
	}
	ticks := shedsim.Run(shedsim.Config{
		Gradient: shed.DefaultGradient(), Policy: p, Base: upstreamBase, Noise: 0.1,
		K: []shedsim.Change{{At: 0, K: 100}},
		Offered: []shedsim.Offer{ // twice what the upstream serves (5000 per second)
			{Class: critical, PerSecond: 400}, {Class: normal, PerSecond: 5000}, {Class: sheddable, PerSecond: 5000},
		},
		Tick: tick, Span: 60 * time.Second, Seed: 4, OnDecision: onDecision,
	})
	assert.Greater(t, reserveChecks, 1000, "the reserve was put to the test")
	t.Logf("%d critical requests decided with the reserve unused", reserveChecks)

	var peaks []int64
	for _, tk := range ticks[100:] { // after 10 s
		if tk.Step.Action != shed.Probe && tk.Step.Action != shed.Probed {
			peaks = append(peaks, tk.Peak)
		}
	}
	t.Logf("in flight %d..%d (median %d) under a capacity of %d..%d", slices.Min(peaks), slices.Max(peaks), median(peaks), slices.Min(limitsOf(ticks[100:])), slices.Max(limitsOf(ticks[100:])))
	assert.GreaterOrEqual(t, slices.Min(peaks), int64(70), "the requests in flight, not the capacity, settle near K = 100")
	assert.LessOrEqual(t, slices.Max(peaks), int64(130), "the requests in flight, not the capacity, settle near K = 100")

	var admitted, offered [3]float64
	for _, tk := range ticks[100:] {
		for c := range 3 {
			admitted[c] += float64(tk.Admitted[c])
			offered[c] += float64(tk.Admitted[c] + tk.Shed[c])
		}
	}
	var shedShare [3]float64
	for c := range 3 {
		shedShare[c] = 1 - admitted[c]/offered[c]
	}
	t.Logf("shed: critical %.2f%%, default %.2f%%, sheddable %.2f%%", 100*shedShare[0], 100*shedShare[1], 100*shedShare[2])
	assert.Less(t, shedShare[critical], 0.02, "critical is almost never shed")
	assert.Greater(t, shedShare[normal], shedShare[critical])
	assert.Greater(t, shedShare[sheddable], shedShare[normal], "sheddable is shed first")
	assert.Greater(t, shedShare[sheddable], 0.5, "sheddable takes most of the cut")
}

func limitsOf(ticks []shedsim.Tick) []int64 {
	var l []int64
	for _, tk := range ticks {
		if tk.Step.Action != shed.Probe {
			l = append(l, tk.Step.Limit)
		}
	}
	return l
}

func TestAnUpstreamThatTurnsTwiceAsSlowIsReprobedAndItsCapacityFound(t *testing.T) {
	one, err := shed.NewPolicy([]shed.Class{{Name: "all"}}, "all")
	require.NoError(t, err)
	ticks := shedsim.Run(shedsim.Config{
		Gradient: shed.DefaultGradient(), Policy: one, Base: upstreamBase, Noise: 0.1,
		K:       []shedsim.Change{{At: 0, K: 50}, {At: 20 * time.Second, K: 50, Base: 2 * upstreamBase}},
		Offered: []shedsim.Offer{{Class: 0, PerSecond: 5000}},
		Tick:    tick, Span: 60 * time.Second, Seed: 5,
	})
	var reprobed time.Duration
	for _, tk := range ticks {
		if tk.At > 20*time.Second && tk.Step.Action == shed.Probed && reprobed == 0 {
			reprobed = tk.At
			assert.InDelta(t, float64(2*upstreamBase), float64(tk.Step.Ideal), float64(upstreamBase)/5, "the new ideal latency")
		}
	}
	require.NotZero(t, reprobed, "the controller re-measured the ideal latency")
	_, settle := limitsIn(ticks, reprobed, time.Minute, 35, 65)
	require.GreaterOrEqual(t, settle, time.Duration(0))
	settled, _ := limitsIn(ticks, reprobed+settle+5*time.Second, time.Minute, 0, 0)
	t.Logf("re-probed %v after the slowdown; then in [0.7K, 1.3K] after %v more; then limit %d..%d",
		reprobed-20*time.Second, settle, slices.Min(settled), slices.Max(settled))
	assert.Less(t, reprobed-20*time.Second, 10*time.Second)
	assert.GreaterOrEqual(t, slices.Min(settled), int64(35))
	assert.LessOrEqual(t, slices.Max(settled), int64(65))
}

func TestALatencyObjectiveBelowTheTargetHoldsTheLatencyNearIt(t *testing.T) {
	g := shed.DefaultGradient()
	g.Objective = 21 * time.Millisecond // the gradient alone would allow 22 ms (ideal 20 ms + 10%)
	one, err := shed.NewPolicy([]shed.Class{{Name: "all"}}, "all")
	require.NoError(t, err)
	ticks := shedsim.Run(shedsim.Config{
		Gradient: g, Policy: one, Base: upstreamBase, Noise: 0.1,
		K:       []shedsim.Change{{At: 0, K: 100}},
		Offered: []shedsim.Offer{{Class: 0, PerSecond: 10_000}},
		Tick:    tick, Span: 40 * time.Second, Seed: 6,
	})
	var latencies []int64
	backoffs := 0
	for _, tk := range ticks[100:] {
		if tk.Step.Action == shed.Backoff {
			backoffs++
		}
		if tk.Step.Action != shed.Probe && tk.Step.Action != shed.Probed {
			latencies = append(latencies, int64(tk.Latency))
		}
	}
	med := time.Duration(median(latencies))
	t.Logf("median latency %v, %d backoffs in %d intervals, limit median %d", med, backoffs, len(latencies), median(limitsOf(ticks[100:])))
	assert.Greater(t, backoffs, 10, "the objective was what held the limit")
	assert.InDelta(t, float64(21*time.Millisecond), float64(med), float64(time.Millisecond))
}
