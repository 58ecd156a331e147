// Package shed holds the pure building blocks of priority load shedding: priority classes with
// reserves and the admission decision (Policy, State), a mergeable latency histogram
// (Histogram), and a gradient controller that adapts the capacity to upstream latency
// (Gradient, GradientState). Like package algorithms it does no I/O, never reads the clock and
// never allocates on the request path; every state is a small value with a fixed-size,
// versioned byte encoding, so that the filter can keep it in Envoy shared data and update it
// with compare-and-swap. docs/shedding.md describes the policy, the controller and how the
// filter uses them.
//
// # Admission
//
// A Policy lists up to MaxClasses classes, highest priority first, each with a Reserve r_i in
// thousandths of capacity that it keeps from every class below it. With H_i = r_0 + … + r_{i−1}
// (H_0 = 0) and C the capacity (in-flight requests):
//
//	Threshold(C, i) = C − ceil(C × H_i / 1000)
//	admit(i)        ⇔ total in flight < Threshold(C, i)     (then InFlight[i]++)
//	release(i)      :  InFlight[i] = max(InFlight[i] − 1, 0)
//
// Thresholds never increase down the list, and the highest class's is C. For a fixed C this
// gives the three guarantees that FuzzAdmit checks after every step:
//
//   - total in flight <= C;
//   - at the same occupancy, a class is never shed while a lower class is admitted;
//   - the classes below i never hold more than Threshold(C, i+1), so class i is admitted while
//     the classes from 0 to i hold fewer than Threshold(C, i) − Threshold(C, i+1): the
//     highest class always has ceil(C × r_0/1000) slots (at least one when r_0 > 0).
//
// Nothing is ever revoked: after C drops, the total may stay above it until requests end.
//
// # Latency histogram
//
// Latencies in whole microseconds fall in 200 buckets: 0 to 7 µs exactly, then eight buckets
// per power of two from 2^3 to 2^27 µs (134 s; later values share the last bucket). A bucket
// is at most an eighth of its lower bound wide, and Quantile interpolates linearly inside it,
// so it errs by less than an eighth of the true value. Histograms merge by adding counts.
//
// # Gradient controller
//
// On each tick (at most one run per 9/10 of Interval; earlier calls change nothing), with s the
// interval's latency sample (a Percentile of its histogram), ideal the latency measured by the
// last probe, and L the limit in thousandths of a request:
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
// A probe pins the capacity to ProbeLimit until ProbeSamples samples from intervals with at
// most ProbeLimit in flight have been seen; ideal is then the lowest of their interval samples
// and L is restored. Probes run on a fresh state, every ProbeInterval plus a jitter derived
// from now, and after 5 consecutive updates at MinLimit.
//
// # Encodings
//
// Every encoding starts with one byte, version<<4 | kind (version 1), followed by
// little-endian fixed-width fields. An empty encoding decodes to the zero value. Decoding
// rejects, wrapping ErrMalformed, a wrong length, version or kind, or a field out of range.
//
//	State          37 bytes: 0x11, InFlight[0..7] uint32, Peak uint32
//	GradientState  68 bytes: 0x12, flags (1 = probing), updates at MinLimit, 0,
//	               then uint64: L (thousandths), L saved by the probe, capacity,
//	               ideal µs, probe's lowest sample µs, probe samples, next probe µs, last now µs
//	Histogram      813 bytes: 0x13, count uint32, min µs uint32, max µs uint32,
//	               200 bucket counts uint32
package shed
