// Package tracing is the decision service's OpenTelemetry tracing: one span per decision, on
// every front (POST /v1/check, envoyproxy/ratelimit's POST /json and gRPC ShouldRateLimit),
// exported over OTLP (gRPC or HTTP) and joined to the caller's trace by the W3C trace context
// (traceparent, tracestate) or B3 (single b3 header or x-b3-* headers) it carries.
//
// Tracing is off by default: a nil *Tracer is valid, starts no span, reads no header and
// allocates nothing, so that the service pays nothing for it (BenchmarkADecisionWithTracingOff).
// New returns a Tracer for a Config whose Endpoint is set (see docs/observability.md,
// "Tracing", for the flags and the OTEL_* environment variables the binary reads).
//
// Trace headers are client input: a value longer than MaxHeaderBytes is ignored, as is one the
// propagators cannot parse; the span then starts a trace of its own (or none, as the sampler
// says). Spans carry no descriptor value: a key's value may be personal (a user, an address), so
// a /v1/check span names the rule (the key's plugin/rule prefix) and an envoyproxy/ratelimit
// span its domain.
//
// This package is the only one that imports OpenTelemetry (internal/depcheck).
package tracing
