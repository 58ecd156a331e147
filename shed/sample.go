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
	latency := time.Duration(max(answered-max(sent, admitted), 0))
	switch {
	case answer == Served && sp.probing && admitted < sp.since:
		return false
	case answer == Served:
	case answer == Refused && !sp.probing && sp.floor > 0 && toUsInt(latency) > sp.floor:
	default:
		return false
	}
	h.Record(latency)
	return true
}
