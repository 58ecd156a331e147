package tracing

import (
	"context"
	"net/http"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/metadata"
)

// Front names the API a decision came in on.
type Front uint8

const (
	FrontCheck Front = iota // POST /v1/check
	FrontJSON               // envoyproxy/ratelimit's POST /json
	FrontGRPC               // envoyproxy/ratelimit's gRPC ShouldRateLimit
)

var (
	spanNames  = [...]string{"POST /v1/check", "POST /json", "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"}
	frontNames = [...]string{"http", "json", "grpc"}
)

// Outcome is what a decision came to.
type Outcome uint8

const (
	OutcomeAllowed Outcome = iota // every descriptor allowed the request
	OutcomeDenied                 // a descriptor denied it
	OutcomeError                  // the store failed (the span's status is Error)
	OutcomeInvalid                // the request was refused before the store was asked (a 4xx)
)

var outcomeNames = [...]string{"allowed", "denied", "error", "invalid"}

// The attributes of a decision span.
const (
	AttrFront        = "meshlimit.front"         // http, json or grpc
	AttrDomain       = "meshlimit.domain"        // envoyproxy/ratelimit's domain
	AttrRule         = "meshlimit.rule"          // /v1/check: the deciding descriptor's plugin/rule
	AttrDescriptors  = "meshlimit.descriptors"   // the number of descriptors
	AttrOutcome      = "meshlimit.outcome"       // allowed, denied, error or invalid
	AttrStoreLatency = "meshlimit.store.latency" // the store's time on the request, in seconds
	AttrErrorType    = "error.type"              // the kind of store failure: timeout, store_full, store
	AttrHTTPStatus   = "http.response.status_code"
	AttrGRPCStatus   = "rpc.grpc.status_code"
)

// Span is the span of one decision. The zero Span (tracing off, or a request not sampled) does
// nothing and costs nothing.
type Span struct{ s trace.Span }

// Decision is what a decision span records when it ends.
type Decision struct {
	Domain      string // envoyproxy/ratelimit's domain; empty on /v1/check
	Rule        string // the rule of /v1/check (KeyRule of the deciding descriptor's key)
	Descriptors int
	Outcome     Outcome
	Store       time.Duration // the store's time on the request; 0 when it was not asked
	ErrorType   string        // with OutcomeError: timeout, store_full or store
	Err         error         // with OutcomeError: the store's failure (the status description)
	HTTPStatus  int           // the HTTP fronts' answer
	GRPCStatus  int           // the gRPC front's status code
}

// StartHTTP starts the span of a decision on an HTTP front, as a child of the trace context the
// request's headers carry (W3C or B3), if any valid one.
func (t *Tracer) StartHTTP(ctx context.Context, f Front, h http.Header) (context.Context, Span) {
	if t == nil {
		return ctx, Span{}
	}
	return t.start(ctx, headerCarrier(h), f)
}

// StartGRPC starts the span of a gRPC decision, as a child of the trace context the call's
// metadata carries (W3C or B3), if any valid one.
func (t *Tracer) StartGRPC(ctx context.Context) (context.Context, Span) {
	if t == nil {
		return ctx, Span{}
	}
	md, _ := metadata.FromIncomingContext(ctx)
	return t.start(ctx, mdCarrier(md), FrontGRPC)
}

// start extracts the trace context of c into ctx and starts the span of front f on it; a request
// whose B3 headers deny sampling without ids gets none when the sampler follows the caller.
func (t *Tracer) start(ctx context.Context, c propagation.TextMapCarrier, f Front) (context.Context, Span) {
	ctx = t.prop.Extract(ctx, c)
	if t.followsParent && !trace.SpanContextFromContext(ctx).IsValid() && b3Denies(c) {
		return ctx, Span{}
	}
	ctx, s := t.tracer.Start(ctx, spanNames[f], trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String(AttrFront, frontNames[f])))
	if !s.IsRecording() {
		return ctx, Span{}
	}
	return ctx, Span{s}
}

// Recording reports whether the span records: when it does not, the caller need not measure
// what End would record.
func (s Span) Recording() bool { return s.s != nil }

// End records d and ends the span.
func (s Span) End(d Decision) {
	if s.s == nil {
		return
	}
	attrs := make([]attribute.KeyValue, 0, 8)
	if d.Domain != "" {
		attrs = append(attrs, attribute.String(AttrDomain, d.Domain))
	}
	if d.Rule != "" {
		attrs = append(attrs, attribute.String(AttrRule, d.Rule))
	}
	attrs = append(attrs, attribute.Int(AttrDescriptors, d.Descriptors), attribute.String(AttrOutcome, outcomeNames[d.Outcome]))
	if d.Store > 0 {
		attrs = append(attrs, attribute.Float64(AttrStoreLatency, d.Store.Seconds()))
	}
	if d.HTTPStatus != 0 {
		attrs = append(attrs, attribute.Int(AttrHTTPStatus, d.HTTPStatus))
	} else {
		attrs = append(attrs, attribute.Int(AttrGRPCStatus, d.GRPCStatus))
	}
	if d.Outcome == OutcomeError {
		attrs = append(attrs, attribute.String(AttrErrorType, d.ErrorType))
		msg := d.ErrorType
		if d.Err != nil {
			msg = d.Err.Error()
		}
		s.s.SetStatus(codes.Error, msg)
	}
	s.s.SetAttributes(attrs...)
	s.s.End()
}

// KeyRule returns the rule part of a /v1/check descriptor key as the filter writes it
// (plugin/rule/fingerprint/value, wire.Key): "plugin/rule", or "" for a key of another shape.
// The value, which may be personal, is never part of it.
func KeyRule(key string) string {
	i := strings.IndexByte(key, '/')
	if i < 0 {
		return ""
	}
	j := strings.IndexByte(key[i+1:], '/')
	if j < 0 {
		return ""
	}
	return key[:i+1+j]
}
