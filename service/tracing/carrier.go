package tracing

import (
	"net/http"
	"strings"

	"go.opentelemetry.io/otel/propagation"

	"google.golang.org/grpc/metadata"
)

// MaxHeaderBytes bounds a trace header the service reads (traceparent, tracestate, b3,
// x-b3-*): a longer value is ignored, as if it were absent. A valid traceparent is 55 bytes and
// a b3 header at most 68; 512 is what W3C asks vendors to propagate of a tracestate at least.
const MaxHeaderBytes = 512

// bounded returns v, or "" when it is longer than MaxHeaderBytes.
func bounded(v string) string {
	if len(v) > MaxHeaderBytes {
		return ""
	}
	return v
}

// headerCarrier reads the trace headers of an HTTP request (the first value of each), bounded.
// The propagators only read: Set does nothing.
type headerCarrier http.Header

func (c headerCarrier) Get(key string) string { return bounded(http.Header(c).Get(key)) }

func (headerCarrier) Set(string, string) {}

func (c headerCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

// mdCarrier reads the trace headers of a gRPC call's metadata (the first value of each),
// bounded.
type mdCarrier metadata.MD

func (c mdCarrier) Get(key string) string {
	if v := metadata.MD(c).Get(key); len(v) > 0 {
		return bounded(v[0])
	}
	return ""
}

func (mdCarrier) Set(string, string) {}

func (c mdCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

// b3Denies reports whether c's B3 headers say "not sampled" (`b3: 0`, `x-b3-sampled: 0` or
// `false`). The B3 propagator drops such a deny when it comes without ids, and the sampler then
// sees no parent: start checks it itself.
func b3Denies(c propagation.TextMapCarrier) bool {
	if c.Get("b3") == "0" {
		return true
	}
	v := c.Get("x-b3-sampled")
	return v == "0" || strings.EqualFold(v, "false")
}
