package shed

import (
	"errors"
	"fmt"
	"time"
)

// Gradient computes an adaptive capacity (a concurrency limit) from upstream latency, on a
// timer: a gradient controller after Envoy's adaptive_concurrency gradient controller and
// Netflix concurrency-limits' Gradient2 (docs/shedding.md gives the equations and sources).
// Zero is not a default (only Objective, Buffer and ProbeJitter may be 0); DefaultGradient
// gives the documented defaults. A Gradient is a plain value; Update never reads the clock and
// never allocates.
type Gradient struct {
	// MinLimit and MaxLimit bound the limit: 1 <= MinLimit <= MaxLimit <= MaxCapacity.
	MinLimit, MaxLimit int64
	// InitialLimit is the limit of a fresh state, in [MinLimit, MaxLimit].
	InitialLimit int64
	// Interval is the update period (10 ms to 1 min). Update runs the controller only once
	// 9/10 of it has passed since its last run, so every worker may call Update on every tick
	// of that period: the first call of an interval updates, the others change nothing.
	Interval time.Duration
	// Percentile is the latency quantile, in thousandths (1 to 1000), that Summarize takes
	// from an interval's histogram: the interval's latency sample.
	Percentile int
	// Buffer is the latency tolerated above the ideal latency before the limit shrinks, in
	// thousandths of the ideal latency (0 to 1000): the target is ideal × (1 + Buffer/1000).
	Buffer int
	// Smoothing is the weight of each new estimate, in thousandths (1 to 1000; 1000 means no
	// smoothing): limit += (estimate − limit) × Smoothing/1000.
	Smoothing int
	// Objective is the latency objective: an interval whose latency sample exceeds it cuts the
	// limit at once by Backoff. 0 disables it; otherwise 1 ms to 1 h.
	Objective time.Duration
	// Backoff is the multiplicative decrease when the Objective is exceeded, in thousandths
	// (500 to 999): limit × Backoff/1000.
	Backoff int
	// ProbeInterval is the time between two measurements of the ideal latency (1 s to 24 h).
	ProbeInterval time.Duration
	// ProbeJitter delays each measurement by up to this share of ProbeInterval, in thousandths
	// (0 to 1000), derived from now, so that proxies do not all probe at once.
	ProbeJitter int
	// ProbeLimit is the limit in force while the ideal latency is measured, in
	// [1, MaxLimit]: low enough that the upstream does not queue.
	ProbeLimit int64
	// ProbeSamples is the number of samples that end a measurement early (1 to 1,000,000): the
	// samples of requests admitted during it (see Sampler), from its second interval on.
	ProbeSamples int64
	// ProbeTimeout ends a measurement that has not gathered ProbeSamples (100 ms to 1 h): at the
	// first update this long after it began (and after its second interval), whatever streams
	// are open.
	ProbeTimeout time.Duration
	// ProbeMinSamples is the fewest samples (1 to 1,000,000; ProbeSamples if that is lower) that
	// a measurement ended by its ProbeTimeout needs to set the ideal latency; with fewer, the
	// ideal latency of the previous measurement stays.
	ProbeMinSamples int64
}

// DefaultGradient returns the defaults of docs/shedding.md.
func DefaultGradient() Gradient {
	return Gradient{
		MinLimit: 3, MaxLimit: 1000, InitialLimit: 20, Interval: 100 * time.Millisecond,
		Percentile: 500, Buffer: 100, Smoothing: 250,
		Objective: 0, Backoff: 900,
		ProbeInterval: time.Minute, ProbeJitter: 150, ProbeLimit: 3, ProbeSamples: 50,
		ProbeTimeout: 2 * time.Second, ProbeMinSamples: 10,
	}
}

// ErrGradient is wrapped by every error of Gradient.Validate.
var ErrGradient = errors.New("shed: invalid gradient controller")

// Validate reports what is wrong with g, naming the field, or nil if g is valid.
func (g Gradient) Validate() error {
	bad := func(field string, want string, got any) error {
		return fmt.Errorf("%w: %s: want %s, got %v", ErrGradient, field, want, got)
	}
	switch {
	case g.MinLimit < 1 || g.MinLimit > MaxCapacity:
		return bad("min_limit", fmt.Sprintf("1 to %d", MaxCapacity), g.MinLimit)
	case g.MaxLimit < g.MinLimit || g.MaxLimit > MaxCapacity:
		return bad("max_limit", fmt.Sprintf("min_limit (%d) to %d", g.MinLimit, MaxCapacity), g.MaxLimit)
	case g.InitialLimit < g.MinLimit || g.InitialLimit > g.MaxLimit:
		return bad("initial_limit", fmt.Sprintf("min_limit to max_limit (%d to %d)", g.MinLimit, g.MaxLimit), g.InitialLimit)
	case g.Interval < 10*time.Millisecond || g.Interval > time.Minute:
		return bad("interval", "10ms to 1m", g.Interval)
	case g.Percentile < 1 || g.Percentile > 1000:
		return bad("percentile", "1 to 1000 thousandths", g.Percentile)
	case g.Buffer < 0 || g.Buffer > 1000:
		return bad("buffer", "0 to 1000 thousandths", g.Buffer)
	case g.Smoothing < 1 || g.Smoothing > 1000:
		return bad("smoothing", "1 to 1000 thousandths", g.Smoothing)
	case g.Objective != 0 && (g.Objective < time.Millisecond || g.Objective > time.Hour):
		return bad("objective", "0 (none) or 1ms to 1h", g.Objective)
	case g.Backoff < 500 || g.Backoff > 999:
		return bad("backoff", "500 to 999 thousandths", g.Backoff)
	case g.ProbeInterval < time.Second || g.ProbeInterval > 24*time.Hour:
		return bad("probe_interval", "1s to 24h", g.ProbeInterval)
	case g.ProbeJitter < 0 || g.ProbeJitter > 1000:
		return bad("probe_jitter", "0 to 1000 thousandths", g.ProbeJitter)
	case g.ProbeLimit < 1 || g.ProbeLimit > g.MaxLimit:
		return bad("probe_limit", fmt.Sprintf("1 to max_limit (%d)", g.MaxLimit), g.ProbeLimit)
	case g.ProbeSamples < 1 || g.ProbeSamples > 1_000_000:
		return bad("probe_samples", "1 to 1000000", g.ProbeSamples)
	case g.ProbeTimeout < 100*time.Millisecond || g.ProbeTimeout > time.Hour:
		return bad("probe_timeout", "100ms to 1h", g.ProbeTimeout)
	case g.ProbeMinSamples < 1 || g.ProbeMinSamples > 1_000_000:
		return bad("probe_min_samples", "1 to 1000000", g.ProbeMinSamples)
	}
	return nil
}

// Summary is what Update learns of one interval.
type Summary struct {
	// Count is the number of latency samples (Sampler.Record) in the interval.
	Count int64
	// Latency is the interval's latency sample: the Gradient's Percentile of the samples,
	// weighted by their latency (Histogram.WeightedQuantile). With Samples, Update outside a
	// probe takes its own: the same Percentile with no sample weighing more than twice the
	// target (Histogram.CappedQuantile), so that a few answers a client makes slow cannot hold
	// most of the weight.
	Latency time.Duration
	// InFlight is the most requests holding a slot during the interval (the current count if
	// the caller keeps no peak): it tells the controller whether the limit is in use at all.
	InFlight int64
	// Samples is the interval's histogram, or nil. Update only reads it, during the call: a
	// probe merges it, and measures the ideal latency over the union of its intervals. Without
	// it, a probe counts the interval as Count samples of Latency.
	Samples *Histogram
}

// Summarize summarizes the interval's histogram h: its Percentile weighted by latency, and h
// itself for a probe.
func (g Gradient) Summarize(h *Histogram, inFlight int64) Summary {
	return Summary{Count: h.Count(), Latency: h.WeightedQuantile(g.Percentile), InFlight: inFlight, Samples: h}
}

// Action says what one Update did.
type Action uint8

// The actions of Update.
const (
	// Hold kept the limit: no samples, no ideal latency yet, or a limit that the traffic
	// does not use (fewer than half of it in flight), which must not grow.
	Hold Action = iota
	// Grow added headroom: the latency sample was within the target.
	Grow
	// Shrink scaled the limit down by the gradient target/sample (at least one half).
	Shrink
	// Backoff cut the limit by Backoff: the latency sample exceeded the Objective.
	Backoff
	// Probe is measuring the ideal latency, with the limit pinned to ProbeLimit.
	Probe
	// Probed ended a measurement: the ideal latency is new and the limit from before the
	// measurement is back.
	Probed
	// Expired ended a measurement at its ProbeTimeout with fewer than ProbeMinSamples: the ideal
	// latency is the previous one (none if no measurement ever ended), and the limit from before
	// the measurement is back.
	Expired
)

var actionNames = [...]string{"hold", "grow", "shrink", "backoff", "probe", "probed", "expired"}

// String returns the action's name, e.g. "shrink".
func (a Action) String() string {
	if int(a) < len(actionNames) {
		return actionNames[a]
	}
	return fmt.Sprintf("action(%d)", uint8(a))
}

// Step reports one Update.
type Step struct {
	// Updated is false when Update came too early (less than 9/10 of Interval after the last
	// run, or with a clock that stepped back): the state is unchanged, and the caller keeps
	// the interval's samples for the next call.
	Updated bool
	Action  Action
	// Limit is the capacity in force until the next Update (ProbeLimit while probing).
	Limit int64
	// Gradient is target/sample in thousandths, clamped to [500, 1000]; 0 when no gradient
	// was computed.
	Gradient int64
	// Ideal is the ideal latency measured by the last probe (0 before the first ends).
	Ideal time.Duration
}
