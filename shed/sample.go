package shed

import (
	"fmt"
	"time"
)

// Answer says who answered a request, which decides what its latency tells the controller.
type Answer uint8

// The answers a Sampler tells apart. The caller classifies a response by its origin and
// status; a request that got no upstream response headers (a reset, a timeout, a local reply of
// the proxy or of another filter) is Local.
const (
	// Served is an upstream response with a status of 100 to 399: the upstream did the work,
	// and the latency is how long that took. It is always a sample, a probe's too.
	Served Answer = iota
	// Refused is an upstream response with a status of 400 to 599. A fast one says nothing
	// about the upstream's queue (a 404 or a 401 costs it nothing; a fast 503 is an upstream
	// failing, not one with room), so it is a sample only when it took longer than the target
	// (ideal × (1 + Buffer)): a slow error is queueing like any other. A probe never counts it.
	Refused
	// Local is no upstream answer at all: never a sample.
	Local
)

var answerNames = [...]string{"served", "refused", "local"}

// String returns the answer's name, e.g. "refused".
func (a Answer) String() string {
	if int(a) < len(answerNames) {
		return answerNames[a]
	}
	return fmt.Sprintf("answer(%d)", uint8(a))
}

// Sampler decides which answers become latency samples, and records them: what a worker needs
// between two ticks to feed its Histogram (Gradient.Sampler gives it, from the state the tick
// read). The zero Sampler records Served answers only.
type Sampler struct {
	since   int64 // unix ns: while probing, requests admitted earlier are not sampled
	floor   int64 // µs: a Refused answer is a sample only above it; 0 means never
	probing bool
}

// Sampler returns the Sampler for the interval that follows the state s. While s probes, it
// records only Served answers to requests admitted at least one Interval after the probe
// began: by then every worker has read the probe's limit (Envoy's controller, likewise,
// disregards the samples of requests that started before its minRTT window). Otherwise it
// records Served answers, and Refused answers slower than the target of s's ideal latency
// (none before the first measurement).
func (g Gradient) Sampler(s *GradientState) Sampler {
	if s.probing {
		return Sampler{probing: true, since: min(s.probeStart, maxTimeUs)*1000 + int64(g.Interval)}
	}
	if s.ideal == 0 {
		return Sampler{}
	}
	return Sampler{floor: g.target(s.ideal)}
}

// Record adds to h the latency of a request admitted at admitted and answered at answered (unix
// ns: when the upstream's response headers arrived, not when the stream ended) if answer makes
// it a sample (see Answer and Gradient.Sampler), and reports whether it did. A latency below 0
// counts as 0. Record does not allocate. The caller releases the request's slot
// (Policy.Release) at the same moment: a stream holds its slot until its response headers, or
// until it ends if none come.
func (sp Sampler) Record(h *Histogram, admitted, answered int64, answer Answer) bool {
	return sp.RecordFrom(h, admitted, admitted, answered, answer)
}

// RecordFrom is Record for a request whose upstream latency starts at sent (unix ns: when its
// body ended, the last the upstream waited for the client), not at its admission: the latency is
// answered − max(sent, admitted). The time a client takes to upload its body is the client's, not
// the upstream's queue, and counted, a client trickling bodies that the upstream then answers at
// once made every one of them a slow sample (issue 20). The probe's cutoff still reads admitted.
func (sp Sampler) RecordFrom(h *Histogram, admitted, sent, answered int64, answer Answer) bool {
	if !sp.takes(admitted, sent, answered, answer) {
		return false
	}
	h.Record(latencyOf(admitted, sent, answered))
	return true
}

// takes reports whether the answer is a sample (see RecordFrom).
func (sp Sampler) takes(admitted, sent, answered int64, answer Answer) bool {
	switch latency := latencyOf(admitted, sent, answered); {
	case answer == Served && sp.probing && admitted < sp.since:
		return false
	case answer == Served:
		return true
	default:
		return answer == Refused && !sp.probing && sp.floor > 0 && toUsInt(latency) > sp.floor
	}
}

// latencyOf is the upstream latency of a request: answered − max(sent, admitted), at least 0.
func latencyOf(admitted, sent, answered int64) time.Duration {
	return time.Duration(max(answered-max(sent, admitted), 0))
}

// ShareBuckets is the number of buckets a SampleShare counts clients in: clients whose keys hash
// to the same bucket share its weight.
const ShareBuckets = 64

// SampleShare bounds the weight one client (a share_key value, hashed by the caller) has in the
// samples of a worker's interval, or of a whole probe: a client's sample is kept only while it has
// kept no more samples than all the other clients together, unless no other client kept a sample
// or was shed since the last Reset (a client alone, such as the only gateway in front of the
// proxy, is the only measure there is; a client whose requests are no samples, 404s, changes
// nothing). So a client that has its own requests answered fast (200s, 304s) holds at most half
// of the count, where the latency weighting leaves it little weight, and a client that holds
// every slot of a probe while others are shed keeps one sample per worker: the probe gathers too
// few to measure, and the last ideal latency stays (issue 20). The zero SampleShare is empty; it
// does not allocate.
type SampleShare struct {
	shed, kept   [ShareBuckets]uint32
	sheds, keeps uint32
}

func shareBucket(key uint64) int { return int(mix(key) % ShareBuckets) }

// Shed counts a request of the client key that the shedder shed.
func (ss *SampleShare) Shed(key uint64) {
	ss.shed[shareBucket(key)]++
	ss.sheds++
}

// Keep reports whether a sample of the client key may be recorded, and counts it when it may.
func (ss *SampleShare) Keep(key uint64) bool {
	b := shareBucket(key)
	others := ss.keeps - ss.kept[b]
	if (others > 0 || ss.sheds > ss.shed[b]) && ss.kept[b] > others {
		return false
	}
	ss.kept[b]++
	ss.keeps++
	return true
}

// Next prepares ss for the interval that prev's state gave way to, whose Sampler is next: it
// empties ss unless both are a probe's (a probe's counts span its intervals, so that one client
// cannot fill it one interval at a time).
func (ss *SampleShare) Next(prev, next Sampler) {
	if !prev.probing || !next.probing {
		*ss = SampleShare{}
	}
}

// RecordShared is RecordFrom for a request of the client key, whose sample is also held to its
// share of ss (SampleShare.Keep).
func (sp Sampler) RecordShared(h *Histogram, ss *SampleShare, key uint64, admitted, sent, answered int64, answer Answer) bool {
	if !sp.takes(admitted, sent, answered, answer) || !ss.Keep(key) {
		return false
	}
	h.Record(latencyOf(admitted, sent, answered))
	return true
}
