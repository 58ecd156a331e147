// Package shed holds the pure building blocks of priority load shedding: priority classes with
// reserves and the admission decision (Policy, State), a mergeable latency histogram
// (Histogram), a gradient controller that adapts the capacity to upstream latency (Gradient,
// GradientState), and the Sampler that decides which answers feed it (Sampler, Answer). Like
// package algorithms it does no I/O, never reads the clock and never allocates on the request
// path; every state is a fixed-size value with a versioned byte encoding, so that the filter
// can keep it in Envoy shared data and update it with compare-and-swap. docs/shedding.md
// describes the policy, the controller and how the filter uses them.
//
// # Admission
//
// A Policy lists up to MaxClasses classes, highest priority first, each with a Reserve r_i in
// thousandths of capacity that it keeps from every class below it. With H_i = r_0 + … + r_{i−1}
// (H_0 = 0), C the capacity (slots) and L the slots of the classes below the highest:
//
//	Threshold(C, i) = C − ceil(C × H_i / 1000)
//	admit(i ≥ 1)    ⇔ total in flight < Threshold(C, i)     (then InFlight[i]++)
//	admit(0)        ⇔ total in flight < Reserved = max(C, L + ceil(C × r_0/1000))
//	release(i)      :  InFlight[i] = max(InFlight[i] − 1, 0)
//
// A request holds its slot until the upstream's response headers (or the end of its stream if
// none come). Thresholds never increase down the list. FuzzAdmit checks after every step:
//
//   - the classes below the highest never take the total above C;
//   - the highest class is admitted whenever it holds fewer than ceil(C × r_0/1000) slots,
//     whatever the lower classes hold (after a drop of C, or streams that hold their slots for
//     ever), and takes the total above C only by that many;
//   - at the same occupancy, a class is never shed while a lower class is admitted;
//   - for a fixed C, the classes below i never hold more than Threshold(C, i+1), so class i is
//     admitted while the classes from 0 to i hold fewer than Threshold(C, i) − Threshold(C, i+1);
//   - AdmitKey never gives a key a slot beyond KeySlots(C) = max(1, ceil(C × KeyShare/1000)).
//
// Below the highest class, nothing is ever revoked: after C drops, the total may stay above it
// until requests end.
//
// # Latency histogram
//
// Latencies in whole microseconds fall in 200 buckets: 0 to 7 µs exactly, then eight buckets
// per power of two from 2^3 to 2^27 µs (134 s; later values share the last bucket). A bucket
// is at most an eighth of its lower bound wide, and Quantile interpolates linearly inside it,
// so it errs by less than an eighth of the true value. WeightedQuantile weighs each sample by
// its latency (the share of slot-time), so that many fast answers or few slow ones move it only
// as far as the time they held. Histograms merge by adding counts.
//
// # Gradient controller
//
// A worker feeds its histogram through a Sampler (Gradient.Sampler of the state its last tick
// read): the time from admission to the response headers of upstream answers that did work
// (Served), and of upstream errors (Refused) slower than the target; no Local answer.
//
// On each tick (at most one run per 9/10 of Interval; earlier calls change nothing), with s the
// interval's latency sample (a Percentile of its histogram, weighted by latency, no sample
// weighing more than twice the target: Histogram.CappedQuantile), ideal the
// latency measured by the last probe, and L the limit in thousandths of a request:
//
//	s > Objective (if set):   L = L × Backoff/1000
//	otherwise:                target = ideal × (1000 + Buffer)/1000
//	                          g = clamp(1000 × target / s, 500, 1000)
//	                          estimate = L × g/1000        if g < 1000
//	                                   = L + sqrt(L)       if g = 1000 and peak in flight >= L/2
//	                                   = L                 otherwise (the limit is not in use)
//	                          L = L + (estimate − L) × Smoothing/1000
//	L = clamp(L, MinLimit, MaxLimit); capacity = floor(L)
//
// A probe pins the capacity to ProbeLimit. It counts nothing of its first interval, and the
// Sampler keeps, during it, only Served answers to requests admitted an Interval after it
// began. It ends after ProbeSamples samples, or at its first update ProbeTimeout after it began;
// ideal is then the Percentile, weighted by latency, of all its samples (the previous ideal if
// it gathered fewer than ProbeMinSamples: Expired), and L is restored. Probes run on a fresh
// state, every ProbeInterval plus a jitter derived from now, and after 5 consecutive updates at
// MinLimit.
//
// # Encodings
//
// Every encoding starts with one byte, version<<4 | kind, followed by little-endian fixed-width
// fields. An empty encoding decodes to the zero value. Decoding rejects, wrapping ErrMalformed,
// a wrong length, version or kind, or a field out of range.
//
//	State          37 bytes: 0x11, InFlight[0..7] uint32, Peak uint32
//	GradientState  873 bytes: 0x22, flags (1 = probing), updates at MinLimit, 0,
//	               then uint64: L (thousandths), L saved by the probe, capacity,
//	               ideal µs, probe start µs, next probe µs, last now µs;
//	               then the probe's Histogram (813 bytes). Version 1 (0x12, 68 bytes, without
//	               the histogram) still decodes.
//	Histogram      813 bytes: 0x13, count uint32, min µs uint32, max µs uint32,
//	               200 bucket counts uint32
package shed
