package filter

import (
	"fmt"

	"github.com/meshlimit/meshlimit/abi"
	"github.com/meshlimit/meshlimit/sharedstate"
)

// host is the filter's one way to Envoy: every feature reaches the host through it, never through
// the SDK or package abi. sdkHost implements it over those, once; the native tests give the
// features a fake. Its methods act on the stream the host calls the filter for (the current
// context), as proxy-wasm's calls do, except enter, which changes it.
type host interface {
	// Store is the proxy's shared data of the plugin's vm_id, with Envoy's compare-and-swap. The
	// bytes Get returns are valid until the next Get.
	sharedstate.Store

	// now reads the host's clock (unix ns). setTick sets the period of the plugin's timer (0: off).
	now() int64
	setTick(ms uint32) error

	// config returns the plugin configuration (nil when there is none).
	config() ([]byte, error)
	// property reads the property at path (encoded with propertyPath) into buf when it fits;
	// setProperty writes one (Envoy keeps it as filter state for the rest of the stream).
	property(path, buf []byte) ([]byte, bool)
	setProperty(path, value []byte)

	// header reads the first value of a header of the part (the request's or the response's)
	// into buf when it fits, as proxy_get_header_map_value does; headers reads every pair of the
	// part (answerPart: the answer to a call, in its callback), repeated headers included.
	header(p part, name string, buf []byte) ([]byte, bool)
	headers(p part) ([][2]string, error)
	addHeader(p part, name string, value []byte)
	replaceHeader(p part, name, value string) bool
	// body reads size bytes from start of the part's body (the request's, the response's or a
	// call answer's).
	body(p part, start, size int) ([]byte, error)
	// chunk reads the size bytes of the part's body the callback was handed into buf when they
	// fit, as header does, and reports false when the host refused.
	chunk(p part, size int, buf []byte) ([]byte, bool)
	// setBody replaces the chunk of the part's body that the callback was handed with data.
	setBody(p part, data []byte) error

	// enter makes stream the current context, and reports false when it is gone.
	enter(stream uint32) bool
	// resume continues the request or the response of the current stream (after the callback).
	resume(p part)
	// closeStream resets the current stream once the callback returns (proxy_close_stream).
	closeStream()
	// sendReply asks the host to answer the current stream locally once the callback returns
	// (reply adds what to do when it refuses).
	sendReply(status uint32, headers [][2]string, body []byte, grpcStatus int32) error

	// dispatch calls cluster (proxy_http_call); the host calls onAnswer with the current context
	// the one that dispatched, and not at all when that stream is gone.
	dispatch(cluster string, headers [][2]string, body []byte, timeoutMs uint32, onAnswer func(numHeaders, bodySize, numTrailers int)) error

	// defineMetric defines a counter or a gauge and returns its id; addMetric adds delta to it
	// (never 0: Envoy refuses it); metric reads it.
	defineMetric(gauge bool, name string) uint32
	addMetric(id uint32, delta int64)
	metric(id uint32) int64

	log(l logLevel, msg string)
}

// propertyPath encodes a property path as the host reads it (the segments separated by NUL bytes):
// encode a fixed path once and pass it on every request.
func propertyPath(segments ...string) []byte { return abi.PropertyPath(segments...) }

// part names what a header or body call of the host reads or writes.
type part uint8

const (
	requestPart part = iota
	responsePart
	answerPart // the answer to a call, in its callback
)

// logLevel is a level of Envoy's log, numbered as proxy-wasm's.
type logLevel uint8

const (
	logDebug logLevel = iota + 1
	logInfo
	logWarn
	logError
	logCritical
)

// logf formats a line of Envoy's log. Its arguments are boxed where it is called: keep it off the
// request path, or behind a check of the level.
func logf(h host, l logLevel, format string, args ...any) { h.log(l, fmt.Sprintf(format, args...)) }

// reply answers the current stream locally (grpcStatus -1: not gRPC). When the host refuses, the
// refusal is logged and the request is resumed instead: a request the filter paused is never left
// waiting for a reply that will not come.
func reply(h host, status uint32, headers [][2]string, body []byte, grpcStatus int32) {
	if err := h.sendReply(status, headers, body, grpcStatus); err != nil {
		logf(h, logError, "meshlimit: sending the local response: %v; the request goes on", err)
		h.resume(requestPart)
	}
}

// statsHost is the host as a plugin's features reach it: every call goes to the host but a
// counter's increment, which stays in the guest (one cell per counter) until flush adds every cell
// that moved to its host counter. The plugin flushes on every tick of its timer (a loop over its
// counters: a few hundred instructions at most every shapeTickMillis), when it stops, and when it starts (a new configuration on the same context, a refused one): a
// counter reaches the host up to one flush late, and a request makes no host call for its counts.
type statsHost struct {
	host
	ids     []uint32 // the host counters, by cell
	cells   []uint64 // what each counted since the last flush
	untimed bool     // the host refused the timer: each stream's end flushes
}

// statsFlushMillis is the longest a count waits in the guest: Envoy's stats sinks see a counter at
// their own flush, every 5 s by default (docs/envoy-host.md), so a count up to 1 s late is not seen
// later by anyone. It is also the timer of a plugin whose features need none.
const statsFlushMillis = 1000

// flush adds what every counter counted since the last flush to the host's counter.
func (s *statsHost) flush() {
	for i, v := range s.cells {
		if v != 0 {
			s.cells[i] = 0
			s.host.addMetric(s.ids[i], int64(v))
		}
	}
}

// counter is a host counter, counted in the guest (statsHost).
type counter struct {
	s *statsHost
	i int
}

// newCounter defines the counter name on h: a plugin's statsHost keeps it with the plugin's
// counters; any other host gets a set of its own, flushed only by that set's flush.
func newCounter(h host, name string) counter {
	s, ok := h.(*statsHost)
	if !ok {
		s = &statsHost{host: h}
	}
	s.ids = append(s.ids, s.host.defineMetric(false, name))
	s.cells = append(s.cells, 0)
	return counter{s, len(s.ids) - 1}
}

// inc adds n to the counter (in the guest: flush hands it to the host, never an increment by 0,
// which Envoy refuses).
func (c counter) inc(n uint64) { c.s.cells[c.i] += n }

// gauge is a host gauge.
type gauge struct {
	h  host
	id uint32
}

func newGauge(h host, name string) gauge { return gauge{h, h.defineMetric(true, name)} }

// set sets the gauge to v.
func (g gauge) set(v int64) {
	if d := v - g.h.metric(g.id); d != 0 {
		g.h.addMetric(g.id, d)
	}
}
