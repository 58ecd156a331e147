package shed

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const (
	ms   = time.Millisecond
	base = int64(1_700_000_000 * time.Second)
)

// testGradient has no smoothing and no jitter, so each step of a timeline is exact.
func testGradient() Gradient {
	return Gradient{
		MinLimit: 2, MaxLimit: 100, InitialLimit: 10, Interval: 100 * ms,
		Percentile: 500, Buffer: 100, Smoothing: 1000,
		Objective: 50 * ms, Backoff: 900,
		ProbeInterval: 10 * time.Second, ProbeJitter: 0, ProbeLimit: 2, ProbeSamples: 10,
		ProbeTimeout: time.Second, ProbeMinSamples: 4,
	}
}

// tick is one Update of a timeline: at (after base), the interval's summary, and the expected
// action, limit and gradient.
type tick struct {
	at           time.Duration
	count        int64
	latency      time.Duration
	inFlight     int64
	wantAction   Action
	wantLimit    int64
	wantGradient int64
}

func runTicks(t *testing.T, g Gradient, s GradientState, ticks []tick) GradientState {
	t.Helper()
	for i, k := range ticks {
		var st Step
		s, st = g.Update(s, base+int64(k.at), Summary{Count: k.count, Latency: k.latency, InFlight: k.inFlight})
		if st.Action != k.wantAction || st.Limit != k.wantLimit || st.Gradient != k.wantGradient {
			t.Errorf("step %d at %v (%d samples, %v, %d in flight): %v to %d (gradient %d), want %v to %d (gradient %d)",
				i, k.at, k.count, k.latency, k.inFlight, st.Action, st.Limit, st.Gradient, k.wantAction, k.wantLimit, k.wantGradient)
		}
		require.Equal(t, st.Limit, s.Capacity())
	}
	return s
}

// probed returns a state that has measured an ideal latency of 10 ms, with the limit at 10,
// in a probe that ended at 200 ms (its first interval is not counted).
func probed(t *testing.T, g Gradient) GradientState {
	return runTicks(t, g, GradientState{}, []tick{
		{0, 0, 0, 0, Probe, 2, 0},
		{100 * ms, 30, 30 * ms, 2, Probe, 2, 0}, // the first interval: not counted
		{200 * ms, 10, 10 * ms, 2, Probed, 10, 0},
	})
}

func TestGradientTimelines(t *testing.T) {
	g := testGradient()
	tests := []struct {
		name  string
		ticks []tick
	}{
		{"latency within the target grows the limit by its square root", []tick{
			{300 * ms, 20, 10 * ms, 10, Grow, 13, 1000}, // 10 + √10
			{400 * ms, 20, 11 * ms, 13, Grow, 16, 1000}, // 11 ms is the target exactly: 13.162 + √13.162
		}},
		{"a limit the traffic does not use does not grow", []tick{
			{300 * ms, 20, 10 * ms, 4, Hold, 10, 1000},
			{400 * ms, 20, 10 * ms, 5, Grow, 13, 1000},
		}},
		{"an interval without samples holds the limit", []tick{
			{300 * ms, 0, 0, 10, Hold, 10, 0},
		}},
		{"latency above the target shrinks the limit by target over sample", []tick{
			{300 * ms, 20, 20 * ms, 10, Shrink, 5, 550}, // 11/20
		}},
		{"the gradient never cuts more than half at once", []tick{
			{300 * ms, 20, 45 * ms, 10, Shrink, 5, 500},
		}},
		{"latency over the objective backs off multiplicatively", []tick{
			{300 * ms, 20, 51 * ms, 10, Backoff, 9, 0},
			{400 * ms, 20, 51 * ms, 10, Backoff, 8, 0}, // 10 × 0.9 × 0.9 = 8.1
		}},
		{"the limit never leaves its bounds", []tick{
			{300 * ms, 20, 45 * ms, 10, Shrink, 5, 500},
			{400 * ms, 20, 45 * ms, 10, Shrink, 2, 500},
			{500 * ms, 20, 45 * ms, 10, Shrink, 2, 500},
		}},
		{"a probe comes back 10 s after the last one ended", []tick{
			{9*time.Second + 100*ms, 20, 10 * ms, 10, Grow, 13, 1000},
			{10*time.Second + 100*ms, 20, 10 * ms, 13, Grow, 16, 1000},
			{10*time.Second + 200*ms, 20, 10 * ms, 16, Probe, 2, 0}, // it ended at 200 ms
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			runTicks(t, g, probed(t, g), tt.ticks)
		})
	}
}

func TestAProbeSkipsItsFirstIntervalAndTakesTheWeightedPercentileOfAllItsSamples(t *testing.T) {
	g := testGradient()
	s := runTicks(t, g, probed(t, g), []tick{
		{300 * ms, 20, 20 * ms, 20, Shrink, 5, 550},
		{10*time.Second + 200*ms, 20, 11 * ms, 5, Probe, 2, 0},
		{10*time.Second + 300*ms, 50, 30 * ms, 5, Probe, 2, 0}, // recorded before every worker saw the probe: not counted
		{10*time.Second + 400*ms, 4, 14 * ms, 2, Probe, 2, 0},
		{10*time.Second + 500*ms, 4, 12 * ms, 2, Probe, 2, 0},
		{10*time.Second + 600*ms, 0, 0, 0, Probe, 2, 0},
		{10*time.Second + 700*ms, 4, 13 * ms, 1, Probed, 5, 0}, // 12 samples: the limit from before is back
	})
	assert.InDelta(t, float64(13*ms), float64(usDuration(s.ideal)), float64(ms), "the median of 12, 13 and 14 ms, not the lowest interval's 12 ms")
}

func TestAProbeEndsAtItsTimeoutWhateverStreamsAreOpen(t *testing.T) {
	g := testGradient()
	ticks := []tick{{300 * ms, 20, 20 * ms, 20, Shrink, 5, 550}, {10*time.Second + 200*ms, 20, 11 * ms, 50, Probe, 2, 0}}
	for i := range time.Duration(9) { // 50 streams stay open, far above the probe's limit, and one sample per interval ends
		ticks = append(ticks, tick{10*time.Second + 300*ms + i*100*ms, 1, 12 * ms, 50, Probe, 2, 0})
	}
	ticks = append(ticks, tick{11*time.Second + 200*ms, 1, 12 * ms, 50, Probed, 5, 0}) // a second after it began
	s := runTicks(t, g, probed(t, g), ticks)
	assert.Equal(t, 12*ms, usDuration(s.ideal), "9 samples of the 10 wanted, more than ProbeMinSamples")
}

func TestAProbeThatTimesOutWithTooFewSamplesKeepsTheLastIdealLatency(t *testing.T) {
	g := testGradient()
	ticks := []tick{{300 * ms, 20, 20 * ms, 20, Shrink, 5, 550}, {10*time.Second + 200*ms, 20, 11 * ms, 4, Probe, 2, 0}}
	for i := range time.Duration(9) { // 4 requests that never get their response headers hold more than the probe's limit
		ticks = append(ticks, tick{10*time.Second + 300*ms + i*100*ms, 0, 0, 4, Probe, 2, 0})
	}
	ticks = append(ticks,
		tick{11*time.Second + 200*ms, 3, 1 * ms, 4, Expired, 5, 0}, // 3 samples, fewer than ProbeMinSamples
		tick{11*time.Second + 300*ms, 20, 11 * ms, 5, Grow, 7, 1000},
		tick{21*time.Second + 100*ms, 20, 11 * ms, 7, Grow, 10, 1000},
		tick{21*time.Second + 200*ms, 20, 11 * ms, 10, Probe, 2, 0}, // the next probe, on schedule
	)
	s := runTicks(t, g, probed(t, g), ticks)
	assert.Equal(t, 10*ms, usDuration(s.ideal))
}

func TestAFirstProbeThatTimesOutLeavesNoIdealLatencyAndTheLimitHeld(t *testing.T) {
	g := testGradient()
	ticks := []tick{{0, 0, 0, 0, Probe, 2, 0}}
	for i := range time.Duration(9) {
		ticks = append(ticks, tick{100*ms + i*100*ms, 0, 0, 4, Probe, 2, 0})
	}
	ticks = append(ticks,
		tick{time.Second, 0, 0, 4, Expired, 10, 0},
		tick{1100 * ms, 20, 45 * ms, 10, Hold, 10, 0}, // no ideal latency: nothing to steer by
		tick{11 * time.Second, 20, 45 * ms, 10, Probe, 2, 0},
	)
	s := runTicks(t, g, GradientState{}, ticks)
	assert.Zero(t, s.ideal)
}

func TestALimitStuckAtItsFloorForFiveUpdatesTriggersAProbe(t *testing.T) {
	g := testGradient()
	s := runTicks(t, g, probed(t, g), []tick{
		{300 * ms, 20, 45 * ms, 10, Shrink, 5, 500},
		{400 * ms, 20, 45 * ms, 10, Shrink, 2, 500}, // 2.5
		{500 * ms, 20, 45 * ms, 10, Shrink, 2, 500}, // at the floor: 1
		{600 * ms, 20, 45 * ms, 10, Shrink, 2, 500},
		{700 * ms, 20, 45 * ms, 10, Shrink, 2, 500},
		{800 * ms, 20, 45 * ms, 10, Shrink, 2, 500},
		{900 * ms, 20, 45 * ms, 10, Shrink, 2, 500}, // 5
		{time.Second, 20, 40 * ms, 2, Probe, 2, 0},
		{1100 * ms, 10, 40 * ms, 2, Probe, 2, 0},
		{1200 * ms, 10, 40 * ms, 2, Probed, 2, 0},
		{1300 * ms, 10, 40 * ms, 2, Grow, 3, 1000}, // the upstream is slower now: 40 ms is the new ideal
	})
	assert.Equal(t, 40*ms, usDuration(s.ideal))
}

func TestATickTooEarlyOrFromAClockThatSteppedBackChangesNothing(t *testing.T) {
	g := testGradient()
	s := probed(t, g) // last run at 200 ms
	sum := Summary{Count: 20, Latency: 10 * ms, InFlight: 10}
	tests := []struct {
		name string
		at   time.Duration
	}{
		{"a second worker's tick at the same instant", 200 * ms},
		{"a tick half an interval later", 250 * ms},
		{"a tick just under nine tenths of an interval later", 289*ms + 999*time.Microsecond},
		{"a clock that stepped back a second", -800 * ms},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			next, st := g.Update(s, base+int64(tt.at), sum)
			assert.Equal(t, s, next)
			assert.Equal(t, Step{Action: Hold, Limit: 10, Ideal: 10 * ms}, st)
		})
	}
	next, st := g.Update(s, base+int64(290*ms), sum)
	assert.Equal(t, Step{Updated: true, Action: Grow, Limit: 13, Gradient: 1000, Ideal: 10 * ms}, st, "nine tenths of an interval is enough: a tick may come a little early")
	_, st = g.Update(next, base+int64(300*ms), sum)
	assert.False(t, st.Updated, "and the next interval starts from that run")
}

func TestTheProbeJitterStaysWithinItsShareOfTheInterval(t *testing.T) {
	g := testGradient()
	g.ProbeJitter = 150
	seen := map[int64]bool{}
	for n := int64(0); n < 2000; n++ {
		d := g.probeDelay(1_700_000_000_000_000 + n*7919)
		require.GreaterOrEqual(t, d, int64(10_000_000))
		require.LessOrEqual(t, d, int64(11_500_000))
		seen[d/100_000] = true
	}
	assert.Greater(t, len(seen), 12, "delays spread over the 1.5 s of jitter")
}

func TestSmoothingMovesTheLimitPartOfTheWay(t *testing.T) {
	g := testGradient()
	g.Smoothing = 250
	runTicks(t, g, probed(t, g), []tick{
		{300 * ms, 20, 22 * ms, 10, Shrink, 8, 500}, // 10 + (5 − 10)/4 = 8.75
		{400 * ms, 20, 51 * ms, 10, Backoff, 7, 0},  // backoff is never smoothed: 8.75 × 0.9
	})
}

func TestUpdateIsDeterministic(t *testing.T) {
	g := DefaultGradient()
	var a, b GradientState
	for i := range int64(2000) {
		sum := Summary{Count: 100, Latency: time.Duration(10+i%7) * ms, InFlight: 10 + i%50}
		var sa, sb Step
		a, sa = g.Update(a, base+i*int64(100*ms), sum)
		b, sb = g.Update(b, base+i*int64(100*ms), sum)
		require.Equal(t, sa, sb)
	}
	assert.Equal(t, a, b)
}

func TestAnInvalidGradientHoldsTheState(t *testing.T) {
	g := testGradient()
	s := probed(t, g)
	g.MinLimit = 0
	next, st := g.Update(s, base+int64(time.Second), Summary{Count: 1, Latency: ms, InFlight: 10})
	assert.Equal(t, s, next)
	assert.Equal(t, Step{Action: Hold, Limit: 10}, st)
}

func TestValidateNamesTheField(t *testing.T) {
	tests := []struct {
		name    string
		edit    func(*Gradient)
		wantErr string
	}{
		{"a floor of zero", func(g *Gradient) { g.MinLimit = 0 }, "min_limit: want 1 to 1000000, got 0"},
		{"a ceiling below the floor", func(g *Gradient) { g.MaxLimit = 2 }, "max_limit: want min_limit (3) to 1000000, got 2"},
		{"an initial limit above the ceiling", func(g *Gradient) { g.InitialLimit = 1001 }, "initial_limit: want min_limit to max_limit (3 to 1000), got 1001"},
		{"a percentile of zero", func(g *Gradient) { g.Percentile = 0 }, "percentile: want 1 to 1000 thousandths, got 0"},
		{"a negative buffer", func(g *Gradient) { g.Buffer = -1 }, "buffer: want 0 to 1000 thousandths, got -1"},
		{"no smoothing weight", func(g *Gradient) { g.Smoothing = 0 }, "smoothing: want 1 to 1000 thousandths, got 0"},
		{"a sub-millisecond objective", func(g *Gradient) { g.Objective = time.Microsecond }, "objective: want 0 (none) or 1ms to 1h, got 1µs"},
		{"a backoff that does not back off", func(g *Gradient) { g.Backoff = 1000 }, "backoff: want 500 to 999 thousandths, got 1000"},
		{"a probe every 100 ms", func(g *Gradient) { g.ProbeInterval = 100 * ms }, "probe_interval: want 1s to 24h, got 100ms"},
		{"an update every millisecond", func(g *Gradient) { g.Interval = ms }, "interval: want 10ms to 1m, got 1ms"},
		{"a jitter of more than the interval", func(g *Gradient) { g.ProbeJitter = 1001 }, "probe_jitter: want 0 to 1000 thousandths, got 1001"},
		{"a probe limit above the ceiling", func(g *Gradient) { g.ProbeLimit = 1001 }, "probe_limit: want 1 to max_limit (1000), got 1001"},
		{"a probe of no samples", func(g *Gradient) { g.ProbeSamples = 0 }, "probe_samples: want 1 to 1000000, got 0"},
	}
	require.NoError(t, DefaultGradient().Validate())
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := DefaultGradient()
			tt.edit(&g)
			err := g.Validate()
			require.Error(t, err)
			assert.True(t, errors.Is(err, ErrGradient))
			assert.Equal(t, "shed: invalid gradient controller: "+tt.wantErr, err.Error())
		})
	}
}

func TestGradientStateEncodingRoundTrips(t *testing.T) {
	g := testGradient()
	s := runTicks(t, g, probed(t, g), []tick{{300 * ms, 20, 10 * ms, 10, Grow, 13, 1000}})
	b := s.AppendBinary(nil)
	require.Len(t, b, GradientStateSize)
	assert.Equal(t, byte(0x22), b[0], "version 2")
	got, err := DecodeGradientState(b)
	require.NoError(t, err)
	assert.Equal(t, s, got)

	var h Histogram
	h.Record(12 * ms)
	probing, _ := g.Update(s, base+int64(10200*ms), Summary{})
	probing, _ = g.Update(probing, base+int64(10300*ms), Summary{})
	probing, _ = g.Update(probing, base+int64(10400*ms), Summary{Count: 1, Latency: 12 * ms, Samples: &h})
	got, err = DecodeGradientState(probing.AppendBinary(nil))
	require.NoError(t, err)
	assert.Equal(t, probing, got, "a probe in progress keeps its samples")
	assert.Equal(t, int64(1), got.probe.Count())

	fresh, err := DecodeGradientState(nil)
	require.NoError(t, err)
	assert.Equal(t, GradientState{}, fresh)
}

func TestDecodeGradientStateRejectsWhatItCannotTrust(t *testing.T) {
	good := (&GradientState{}).AppendBinary(nil)
	with := func(off int, v ...byte) []byte {
		b := append([]byte(nil), good...)
		copy(b[off:], v)
		return b
	}
	tests := []struct {
		name    string
		b       []byte
		wantErr string
	}{
		{"a short record", good[:10], "controller state of 10 bytes, want 873"},
		{"a version 1 record of the new length", with(0, 0x12), "controller state of 873 bytes, want 68"},
		{"an unknown version", with(0, 0x32), "version 3, want 2"},
		{"a malformed probe histogram", with(60, 0x13, 1), "histogram count 1, buckets add up to 0 (the controller's probe)"},
		{"a histogram record", with(0, 0x13), "kind 3, want 2 (controller)"},
		{"an unknown flag", with(1, 2), "controller flags 2, 0, 0"},
		{"a limit above the maximum", with(4, 0, 0, 0, 0, 0, 0, 0, 1), "controller limit 72057594037927936 out of range [0, 1000000000]"},
		{"a capacity above the maximum", with(20, 0x41, 0x42, 0x0f), "controller capacity 1000001 out of range [0, 1000000]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := DecodeGradientState(tt.b)
			require.Error(t, err)
			assert.True(t, errors.Is(err, ErrMalformed))
			assert.Equal(t, "shed: malformed state: "+tt.wantErr, err.Error())
		})
	}
}

func TestActionNames(t *testing.T) {
	assert.Equal(t, "hold grow shrink backoff probe probed expired action(9)",
		Hold.String()+" "+Grow.String()+" "+Shrink.String()+" "+Backoff.String()+" "+Probe.String()+" "+Probed.String()+" "+Expired.String()+" "+Action(9).String())
}

func TestAbsurdSummariesNeitherOverflowNorStallTheController(t *testing.T) {
	g := testGradient()
	runTicks(t, g, GradientState{}, []tick{
		{0, 0, 0, 0, Probe, 2, 0},
		{100 * ms, math.MaxInt64, 10 * ms, 0, Probe, 2, 0},
		{200 * ms, math.MaxInt64, 10 * ms, 0, Probed, 10, 0},   // a count that would overflow the probe's tally
		{300 * ms, 20, 10 * ms, math.MaxInt64, Grow, 13, 1000}, // in flight that would overflow the "in use" test
		{400 * ms, 20, math.MaxInt64, 10, Backoff, 11, 0},      // a latency of 292 years
		{500 * ms, -5, 10 * ms, -5, Hold, 11, 0},               // negative counts are none
	})
}

// Issue 20 (review r20, B9): answers that a client makes slow on purpose weigh no more than twice
// the target each, so with honest answers at the ideal latency they must be more than
// w/(w + 2 × target) = 10/32 (31%) of an interval's samples (p50, buffer 10%) to move the sample
// off the honest ones. Weighted by their full latency, 2% of answers after a second held two
// thirds of the weight and backed the limit off.
func TestAnswersAfterASecondUnderAThirdOfTheSamplesCannotShrinkTheLimit(t *testing.T) {
	for _, tc := range []struct {
		name       string
		slow       int // of 100 samples, answered after 1 s; the others at the ideal 10 ms
		wantAction Action
	}{
		{"none of them", 0, Grow},
		{"2 of 100", 2, Grow},
		{"10 of 100", 10, Grow},
		{"25 of 100", 25, Grow},
		{"40 of 100 (as many as a real queue)", 40, Backoff},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := testGradient()
			s := probed(t, g)
			var h Histogram
			for i := range 100 {
				lat := 10 * ms
				if i < tc.slow {
					lat = time.Second
				}
				h.Record(lat)
			}
			_, st := g.Update(s, base+int64(300*ms), g.Summarize(&h, 10))
			assert.Equal(t, tc.wantAction, st.Action)
		})
	}
}

// The probe's samples weigh at most twice the last target too: a few answers a client makes slow
// cannot raise the ideal latency (and the target, until the limit grows without bound), and an
// upstream that really slowed down is still measured, since the cap changes only the weights.
func TestAFewSlowAnswersInAProbeCannotRaiseTheIdealLatencyButASlowerUpstreamIsMeasured(t *testing.T) {
	for _, tc := range []struct {
		name      string
		fast      int           // samples at 10 ms
		slow      int           // samples at slowLat
		slowLat   time.Duration //
		wantIdeal time.Duration
	}{
		{"3 of 11 answered after a second", 8, 3, time.Second, 10 * ms},
		{"an upstream now twice as slow", 0, 12, 20 * ms, 20 * ms},
		{"an upstream now ten times as slow", 0, 12, 100 * ms, 100 * ms},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := testGradient()
			s := runTicks(t, g, probed(t, g), []tick{
				{10*time.Second + 200*ms, 0, 0, 5, Probe, 2, 0},
				{10*time.Second + 300*ms, 0, 0, 2, Probe, 2, 0}, // the probe's first interval
			})
			var h Histogram
			for range tc.fast {
				h.Record(10 * ms)
			}
			for range tc.slow {
				h.Record(tc.slowLat)
			}
			s, st := g.Update(s, base+int64(10*time.Second+400*ms), g.Summarize(&h, 2))
			require.Equal(t, Probed, st.Action)
			assert.InDelta(t, float64(tc.wantIdeal), float64(usDuration(s.ideal)), float64(tc.wantIdeal)/8)
		})
	}
}
