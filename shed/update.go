package shed

import (
	"encoding/binary"
	"fmt"
	"math"
	"time"
)

// milli is the fixed-point unit of the limit in GradientState: thousandths of a request.
const milli = 1000

// maxTimeUs is the latest time the controller represents, 2^52 µs after the unix epoch (the
// year 2112); later times are clamped to it, as in package algorithms.
const maxTimeUs = 1 << 52

// atMinProbe is how many consecutive updates at MinLimit trigger a new measurement of the
// ideal latency: a limit pinned at its floor may mean that the ideal latency is stale (Envoy
// re-measures after 5 sampling windows at the minimum).
const atMinProbe = 5

// GradientState is the controller's state: fixed-size, and encodable (AppendBinary,
// DecodeGradientState) so that it can live in one shared-data record. The zero GradientState
// is fresh: its first Update starts at InitialLimit and measures the ideal latency.
type GradientState struct {
	limit      int64 // thousandths of a request; 0 means fresh
	saved      int64 // the limit to restore when a probe ends
	capacity   int64 // the limit in force, in whole requests
	ideal      int64 // µs; 0 until a probe measures one
	probeStart int64 // µs, the now of the update that began the current (or last) probe
	nextProbe  int64 // µs
	last       int64 // µs, the now of the last run
	probing    bool
	atMin      uint8     // consecutive updates that ended at MinLimit
	probe      Histogram // the current probe's samples, from its second interval on
}

// Capacity returns the limit in force, in whole requests: what the request path passes to
// Policy.Admit until the next Update. It is 0 for a fresh state.
func (s *GradientState) Capacity() int64 { return s.capacity }

// Update runs the controller once, at the end of an interval summarized by sum, at time now
// (unix nanoseconds), and returns the next state and what it did. Call it on a timer of period
// Interval. A call less than 9/10 of Interval after the last run (a second worker's tick of
// the same interval, or a clock that stepped back) changes nothing and reports
// Step.Updated == false. See docs/shedding.md for the equations; in short:
//
//   - probing (a fresh state, every ProbeInterval plus jitter, or after 5 updates at
//     MinLimit): the limit is ProbeLimit. The probe's first interval is not counted (it holds
//     samples recorded before the workers saw the probe); the later ones add their samples
//     (sum.Samples) to the probe's histogram. The probe ends when it holds ProbeSamples, or at
//     the first update ProbeTimeout after it began: the ideal latency is then the Percentile,
//     weighted by latency (none weighing more than twice the last target, if any), of all its
//     samples (kept from the last probe if this one gathered fewer than ProbeMinSamples), and
//     the limit from before the probe is back;
//   - the sample is the interval's Percentile, weighted by latency, with no sample weighing
//     more than twice the target (see Summary.Latency);
//   - over the Objective: limit × Backoff/1000, at once;
//   - otherwise, with target = ideal × (1 + Buffer/1000) and gradient = clamp(target/sample,
//     0.5, 1): a gradient below 1 moves the limit towards gradient × limit; a gradient of 1
//     moves it towards limit + sqrt(limit) if at least half of the limit was in use, and
//     holds it otherwise; "towards" is the Smoothing.
//
// The limit always stays in [MinLimit, MaxLimit]. g must be valid (Validate); Update on an
// invalid g returns the state unchanged with a Hold step.
func (g Gradient) Update(s GradientState, now int64, sum Summary) (GradientState, Step) {
	if g.Validate() != nil {
		return s, Step{Action: Hold, Limit: s.capacity}
	}
	n := quantize(now)
	if s.limit != 0 && n < s.last+g.Interval.Microseconds()*9/10 {
		return s, Step{Action: Hold, Limit: s.capacity, Ideal: usDuration(s.ideal)}
	}
	prev := s.last
	s.last = n
	sum.Count = min(max(sum.Count, 0), 1<<40) // the bounds keep every product below 2^63
	sum.InFlight = min(max(sum.InFlight, 0), 1<<40)
	if s.limit == 0 {
		s.limit = g.InitialLimit * milli
		s = g.startProbe(s, n)
	}
	var st Step
	if s.probing {
		s, st = g.probe(s, prev, n, sum)
	} else {
		s, st = g.adjust(s, n, sum)
	}
	s.limit = min(max(s.limit, g.MinLimit*milli), g.MaxLimit*milli)
	s.saved = min(max(s.saved, g.MinLimit*milli), g.MaxLimit*milli)
	s.capacity = s.limit / milli
	if s.probing {
		s.capacity = g.ProbeLimit
	}
	st.Updated, st.Limit, st.Ideal = true, s.capacity, usDuration(s.ideal)
	return s, st
}

func (g Gradient) startProbe(s GradientState, n int64) GradientState {
	s.probing, s.saved, s.probeStart, s.atMin = true, s.limit, n, 0
	s.probe.Reset()
	return s
}

// probe counts the interval that ended at n (and began at prev) towards the current
// measurement, and ends it after ProbeSamples or at its ProbeTimeout.
func (g Gradient) probe(s GradientState, prev, n int64, sum Summary) (GradientState, Step) {
	counted := prev > s.probeStart // not the probe's first interval
	if counted {
		if sum.Samples != nil {
			s.probe.Merge(sum.Samples)
		} else {
			s.probe.recordN(sum.Latency, sum.Count)
		}
	}
	late := counted && n >= s.probeStart+g.ProbeTimeout.Microseconds()
	if s.probe.Count() < g.ProbeSamples && !late {
		return s, Step{Action: Probe}
	}
	st := Step{Action: Probed}
	if s.probe.Count() >= min(g.ProbeMinSamples, g.ProbeSamples) {
		s.ideal = max(toUsInt(g.probeIdeal(&s.probe, s.ideal)), 1)
	} else {
		st.Action = Expired
	}
	s.probing, s.limit = false, s.saved
	s.probe.Reset()
	s.nextProbe = min(n+g.probeDelay(n), maxTimeUs)
	return s, st
}

// probeDelay returns the time to the next probe after one that ends at n (µs): ProbeInterval
// plus a jitter in [0, ProbeInterval × ProbeJitter/1000] derived from n.
func (g Gradient) probeDelay(n int64) int64 {
	interval := g.ProbeInterval.Microseconds()
	span := interval * int64(g.ProbeJitter) / 1000
	return interval + int64(mix(uint64(n))%uint64(span+1))
}

// adjust is one update outside a probe.
func (g Gradient) adjust(s GradientState, n int64, sum Summary) (GradientState, Step) {
	if n >= s.nextProbe {
		return g.startProbe(s, n), Step{Action: Probe}
	}
	if sum.Count <= 0 || s.ideal == 0 {
		return s, Step{Action: Hold}
	}
	sample := max(toUsInt(g.sampleOf(s.ideal, sum)), 1)
	var st Step
	if g.Objective > 0 && sample > g.Objective.Microseconds() {
		s.limit = s.limit * int64(g.Backoff) / 1000
		st.Action = Backoff
	} else {
		st.Gradient = min(max(g.target(s.ideal)*1000/sample, 500), 1000)
		estimate := s.limit * st.Gradient / 1000
		st.Action = Shrink
		if st.Gradient == 1000 {
			st.Action, estimate = Hold, s.limit
			if sum.InFlight*2*milli >= s.limit {
				st.Action, estimate = Grow, s.limit+isqrt(s.limit*milli)
			}
		}
		s.limit += (estimate - s.limit) * int64(g.Smoothing) / 1000
	}
	if s.limit <= g.MinLimit*milli {
		if s.atMin++; s.atMin >= atMinProbe {
			s.nextProbe = n // probe at the next update
		}
	} else {
		s.atMin = 0
	}
	return s, st
}

// sampleOf returns the interval's latency sample at an ideal latency of ideal µs: the
// Percentile of sum.Samples with no sample weighing more than twice the target
// (Histogram.CappedQuantile), sum.Latency without a histogram. A sample at twice the target
// already gives the deepest shrink (a gradient of one half), so the cap takes nothing from an
// upstream that queues; what it takes is the weight of a few requests that a client makes slow
// on purpose (a slow endpoint, a trickled body), which weighted by their full latency held most
// of an interval's weight at 2% of its requests (issue 20).
func (g Gradient) sampleOf(ideal int64, sum Summary) time.Duration {
	if sum.Samples == nil || sum.Samples.Count() == 0 {
		return sum.Latency
	}
	return sum.Samples.CappedQuantile(g.Percentile, usDuration(g.sampleCeiling(ideal)))
}

// probeIdeal returns the ideal latency a probe's samples h measure, after a last measurement of
// last µs (0 for none): their Percentile weighted by latency, with no sample weighing more than
// twice the last target when there is one. The cap changes only the weights: when every sample is
// slower (an upstream that slowed down), the result is their Percentile by count, the new
// latency; what it stops is a few answers that a client makes slow holding most of the weight of
// a probe's few slots, and so raising the target until the limit grows without bound.
func (g Gradient) probeIdeal(h *Histogram, last int64) time.Duration {
	if last == 0 {
		return h.WeightedQuantile(g.Percentile)
	}
	return h.CappedQuantile(g.Percentile, usDuration(g.sampleCeiling(last)))
}

// sampleCeiling returns the most (µs) one sample weighs in an interval's latency sample at an
// ideal latency of ideal µs: twice the target.
func (g Gradient) sampleCeiling(ideal int64) int64 { return 2 * g.target(ideal) }

// target returns the latency (µs) tolerated above an ideal latency of ideal µs.
func (g Gradient) target(ideal int64) int64 { return ideal + ideal*int64(g.Buffer)/1000 }

// quantize converts unix nanoseconds to microseconds, clamped to [0, maxTimeUs].
func quantize(now int64) int64 { return min(max(now, 0)/1000, maxTimeUs) }

func usDuration(us int64) time.Duration { return time.Duration(us) * time.Microsecond }

func toUsInt(d time.Duration) int64 { return int64(toUs(d)) }

// isqrt returns floor(sqrt(x)) for 0 <= x < 2^62.
func isqrt(x int64) int64 {
	r := int64(math.Sqrt(float64(x)))
	for r*r > x {
		r--
	}
	for (r+1)*(r+1) <= x {
		r++
	}
	return r
}

// mix is SplitMix64's finalizer: a fixed, well-spread function of its input.
func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

// GradientStateSize is the length of an encoded GradientState: four header bytes, seven
// uint64 fields and the probe's encoded Histogram.
const GradientStateSize = 4 + 7*8 + HistogramSize

// gradientStateSizeV1 is the length of a version 1 GradientState, which DecodeGradientState
// still reads (a proxy upgraded while another still writes the old record).
const gradientStateSizeV1 = 4 + 8*8

// controllerVersion is the version of the GradientState encoding (version 1 had no probe
// histogram).
const controllerVersion = 2

// AppendBinary appends the GradientStateSize-byte encoding of s to dst and returns it; it does
// not allocate when dst has room.
func (s *GradientState) AppendBinary(dst []byte) []byte {
	flags := byte(0)
	if s.probing {
		flags = 1
	}
	dst = append(dst, controllerVersion<<4|kindController, flags, s.atMin, 0)
	for _, v := range [...]int64{s.limit, s.saved, s.capacity, s.ideal, s.probeStart, s.nextProbe, s.last} {
		dst = binary.LittleEndian.AppendUint64(dst, uint64(v))
	}
	return s.probe.AppendBinary(dst)
}

// gradientField is one little-endian uint64 field of an encoded GradientState, with its bound.
type gradientField struct {
	name string
	max  int64
}

var (
	fieldLimit      = gradientField{"limit", MaxCapacity * milli}
	fieldSaved      = gradientField{"saved limit", MaxCapacity * milli}
	fieldCapacity   = gradientField{"capacity", MaxCapacity}
	fieldIdeal      = gradientField{"ideal latency", maxUs32}
	fieldProbeStart = gradientField{"probe start", maxTimeUs}
	fieldNextProbe  = gradientField{"next probe", maxTimeUs}
	fieldLast       = gradientField{"last update", maxTimeUs}
)

// gradientFields lists the uint64 fields of each version after the four header bytes; a
// version 1 record has the lowest sample and the sample count of its probe where version 2
// has the probe's start.
var gradientFields = [...][]gradientField{
	1: {fieldLimit, fieldSaved, fieldCapacity, fieldIdeal, {"probe latency", maxUs32}, {"probe samples", 1_000_000}, fieldNextProbe, fieldLast},
	2: {fieldLimit, fieldSaved, fieldCapacity, fieldIdeal, fieldProbeStart, fieldNextProbe, fieldLast},
}

// DecodeGradientState decodes an encoded GradientState; an empty b is the fresh state. It
// also reads version 1 (without the probe's histogram: a probe in progress restarts its count
// at the next update). Errors wrap ErrMalformed: a wrong length, version or kind, unknown
// flags, a field out of range, or a malformed probe histogram.
func DecodeGradientState(b []byte) (GradientState, error) {
	var s GradientState
	if len(b) == 0 {
		return s, nil
	}
	v := b[0] >> 4
	size := GradientStateSize
	if v == 1 {
		size = gradientStateSizeV1
	} else if err := checkVersion(b, controllerVersion); err != nil {
		return s, err
	}
	if err := checkKind(b, kindController, size); err != nil {
		return s, err
	}
	if b[1] > 1 || b[2] > atMinProbe || b[3] != 0 {
		return GradientState{}, fmt.Errorf("%w: controller flags %d, %d, %d", ErrMalformed, b[1], b[2], b[3])
	}
	s.probing, s.atMin = b[1] == 1, b[2]
	var f [8]int64
	for i, field := range gradientFields[v] {
		u := binary.LittleEndian.Uint64(b[4+8*i:])
		if u > uint64(field.max) {
			return GradientState{}, fmt.Errorf("%w: controller %s %d out of range [0, %d]", ErrMalformed, field.name, u, field.max)
		}
		f[i] = int64(u)
	}
	s.limit, s.saved, s.capacity, s.ideal = f[0], f[1], f[2], f[3]
	if v == 1 {
		s.probeStart, s.nextProbe, s.last = f[7], f[6], f[7]
		return s, nil
	}
	s.probeStart, s.nextProbe, s.last = f[4], f[5], f[6]
	h, err := DecodeHistogram(b[4+7*8:])
	if err != nil {
		return GradientState{}, fmt.Errorf("%w (the controller's probe)", err)
	}
	s.probe = h
	return s, nil
}
