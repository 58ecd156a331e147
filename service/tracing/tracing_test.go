package tracing_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc/metadata"

	"github.com/meshlimit/meshlimit/internal/otlptest"
	"github.com/meshlimit/meshlimit/service/tracing"
)

const (
	traceID  = "4bf92f3577b34da6a3ce929d0e0e4736"
	parentID = "00f067aa0ba902b7"
)

func newTracer(t *testing.T, c tracing.Config) *tracing.Tracer {
	t.Helper()
	tr, err := tracing.New(context.Background(), c)
	require.NoError(t, err)
	require.NotNil(t, tr)
	t.Cleanup(func() { _ = tr.Shutdown(context.Background()) })
	return tr
}

// decide runs one decision span over headers h and flushes it.
func decide(t *testing.T, tr *tracing.Tracer, h http.Header, d tracing.Decision) {
	t.Helper()
	_, sp := tr.StartHTTP(context.Background(), tracing.FrontCheck, h)
	sp.End(d)
	require.NoError(t, tr.Flush(context.Background()))
}

func header(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i < len(kv); i += 2 {
		h.Set(kv[i], kv[i+1])
	}
	return h
}

func TestADecisionSpanJoinsTheTraceOfTheRequestsTraceparent(t *testing.T) {
	for _, proto := range []string{tracing.ProtocolGRPC, tracing.ProtocolHTTP} {
		t.Run(proto, func(t *testing.T) {
			recv := otlptest.StartGRPC(t)
			if proto == tracing.ProtocolHTTP {
				recv = otlptest.StartHTTP(t)
			}
			tr := newTracer(t, tracing.Config{Endpoint: recv.Endpoint, Protocol: proto, ResourceAttributes: "deployment.environment=prod,team=edge%20platform"})
			decide(t, tr, header("traceparent", "00-"+traceID+"-"+parentID+"-01", "tracestate", "vendor=opaque"),
				tracing.Decision{Rule: "meshlimit/per-user", Descriptors: 2, Outcome: tracing.OutcomeDenied, Store: 1500 * time.Microsecond, HTTPStatus: 200})
			s := recv.WaitSpans(t, 1)[0]
			assert.Equal(t, "POST /v1/check", s.Name)
			assert.Equal(t, traceID, s.TraceID)
			assert.Equal(t, parentID, s.ParentSpanID)
			assert.Equal(t, "vendor=opaque", s.TraceState)
			assert.Equal(t, tracepb.Span_SPAN_KIND_SERVER, s.Kind)
			assert.Equal(t, map[string]any{
				tracing.AttrFront: "http", tracing.AttrRule: "meshlimit/per-user", tracing.AttrDescriptors: int64(2),
				tracing.AttrOutcome: "denied", tracing.AttrStoreLatency: 0.0015, tracing.AttrHTTPStatus: int64(200),
			}, s.Attributes)
			assert.Equal(t, tracepb.Status_STATUS_CODE_UNSET, s.StatusCode)
			assert.Equal(t, "meshlimit-service", s.Resource["service.name"])
			assert.Equal(t, "prod", s.Resource["deployment.environment"])
			assert.Equal(t, "edge platform", s.Resource["team"])
		})
	}
}

func TestADecisionSpanJoinsAB3Trace(t *testing.T) {
	for name, h := range map[string]http.Header{
		"single header":    header("b3", traceID+"-"+parentID+"-1"),
		"multiple headers": header("x-b3-traceid", traceID, "x-b3-spanid", parentID, "x-b3-sampled", "1"),
	} {
		t.Run(name, func(t *testing.T) {
			recv := otlptest.StartGRPC(t)
			tr := newTracer(t, tracing.Config{Endpoint: recv.Endpoint})
			decide(t, tr, h, tracing.Decision{Descriptors: 1, HTTPStatus: 200})
			s := recv.WaitSpans(t, 1)[0]
			assert.Equal(t, traceID, s.TraceID)
			assert.Equal(t, parentID, s.ParentSpanID)
			assert.Equal(t, "allowed", s.Attributes[tracing.AttrOutcome])
		})
	}
}

func TestAGRPCDecisionSpanJoinsTheTraceOfTheCallsMetadata(t *testing.T) {
	recv := otlptest.StartGRPC(t)
	tr := newTracer(t, tracing.Config{Endpoint: recv.Endpoint})
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("traceparent", "00-"+traceID+"-"+parentID+"-01"))
	_, sp := tr.StartGRPC(ctx)
	sp.End(tracing.Decision{Domain: "edge", Descriptors: 3, Outcome: tracing.OutcomeAllowed})
	require.NoError(t, tr.Flush(context.Background()))
	s := recv.WaitSpans(t, 1)[0]
	assert.Equal(t, "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", s.Name)
	assert.Equal(t, parentID, s.ParentSpanID)
	assert.Equal(t, map[string]any{tracing.AttrFront: "grpc", tracing.AttrDomain: "edge", tracing.AttrDescriptors: int64(3),
		tracing.AttrOutcome: "allowed", tracing.AttrGRPCStatus: int64(0)}, s.Attributes)
}

func TestAStoreFailureEndsTheSpanWithStatusError(t *testing.T) {
	recv := otlptest.StartGRPC(t)
	tr := newTracer(t, tracing.Config{Endpoint: recv.Endpoint})
	decide(t, tr, nil, tracing.Decision{Descriptors: 1, Outcome: tracing.OutcomeError, ErrorType: "timeout",
		Err: errors.New("context deadline exceeded"), Store: 10 * time.Millisecond, HTTPStatus: 503})
	s := recv.WaitSpans(t, 1)[0]
	assert.Equal(t, tracepb.Status_STATUS_CODE_ERROR, s.StatusCode)
	assert.Equal(t, "context deadline exceeded", s.StatusMessage)
	assert.Equal(t, "timeout", s.Attributes[tracing.AttrErrorType])
	assert.Equal(t, "error", s.Attributes[tracing.AttrOutcome])
}

// A request Envoy did not sample (flags 00) gets no span: the sampler follows the parent. The
// sampled request after it proves the export ran (spans are exported in order).
func TestARequestTheProxyDidNotSampleGetsNoSpan(t *testing.T) {
	recv := otlptest.StartGRPC(t)
	tr := newTracer(t, tracing.Config{Endpoint: recv.Endpoint})
	decide(t, tr, header("traceparent", "00-"+traceID+"-"+parentID+"-00"), tracing.Decision{Descriptors: 1})
	decide(t, tr, header("b3", traceID+"-"+parentID+"-0"), tracing.Decision{Descriptors: 2})
	decide(t, tr, header("traceparent", "00-"+traceID+"-"+parentID+"-01"), tracing.Decision{Descriptors: 3})
	spans := recv.WaitSpans(t, 1)
	require.Len(t, spans, 1)
	assert.Equal(t, int64(3), spans[0].Attributes[tracing.AttrDescriptors])
}

func TestTheAlwaysOffSamplerExportsNothing(t *testing.T) {
	recv := otlptest.StartGRPC(t)
	off := newTracer(t, tracing.Config{Endpoint: recv.Endpoint, Sampler: tracing.SamplerAlwaysOff})
	decide(t, off, header("traceparent", "00-"+traceID+"-"+parentID+"-01"), tracing.Decision{Descriptors: 1})
	on := newTracer(t, tracing.Config{Endpoint: recv.Endpoint, Sampler: tracing.SamplerParentBasedTraceIDRatio, SamplerArg: "1"})
	decide(t, on, nil, tracing.Decision{Descriptors: 2})
	spans := recv.WaitSpans(t, 1)
	require.Len(t, spans, 1)
	assert.Equal(t, int64(2), spans[0].Attributes[tracing.AttrDescriptors])
	assert.Empty(t, spans[0].ParentSpanID, "without a trace context the span starts a trace")
}

// Trace headers are client input: an invalid or oversized one is ignored, and the span starts a
// trace of its own.
func TestAClientThatSendsABadTraceHeaderGetsASpanOfANewTrace(t *testing.T) {
	long := "00-" + traceID + "-" + parentID + "-01" + strings.Repeat(" ", tracing.MaxHeaderBytes)
	for name, h := range map[string]http.Header{
		"malformed traceparent":   header("traceparent", "00-"+traceID+"-zz"+parentID[2:]+"-01"),
		"all-zero trace id":       header("traceparent", "00-00000000000000000000000000000000-"+parentID+"-01"),
		"oversized traceparent":   header("traceparent", long),
		"oversized b3":            header("b3", traceID+"-"+parentID+"-1-"+strings.Repeat("a", tracing.MaxHeaderBytes)),
		"malformed b3":            header("b3", "not-a-trace"),
		"x-b3 without a span id":  header("x-b3-traceid", traceID),
		"oversized x-b3-traceid":  header("x-b3-traceid", strings.Repeat("a", tracing.MaxHeaderBytes+1), "x-b3-spanid", parentID),
		"unsupported version ff":  header("traceparent", "ff-"+traceID+"-"+parentID+"-01"),
		"oversized tracestate ok": nil, // checked below: a valid traceparent keeps, an oversized tracestate drops
	} {
		if h == nil {
			continue
		}
		t.Run(name, func(t *testing.T) {
			recv := otlptest.StartGRPC(t)
			tr := newTracer(t, tracing.Config{Endpoint: recv.Endpoint})
			decide(t, tr, h, tracing.Decision{Descriptors: 1})
			s := recv.WaitSpans(t, 1)[0]
			assert.Empty(t, s.ParentSpanID)
			assert.NotEqual(t, traceID, s.TraceID)
		})
	}
	t.Run("oversized tracestate", func(t *testing.T) {
		recv := otlptest.StartGRPC(t)
		tr := newTracer(t, tracing.Config{Endpoint: recv.Endpoint})
		decide(t, tr, header("traceparent", "00-"+traceID+"-"+parentID+"-01", "tracestate", "a="+strings.Repeat("b", tracing.MaxHeaderBytes)), tracing.Decision{})
		s := recv.WaitSpans(t, 1)[0]
		assert.Equal(t, parentID, s.ParentSpanID, "the traceparent still joins")
		assert.Empty(t, s.TraceState, "the oversized tracestate is dropped")
	})
}

func TestTheRuleOfAKeyIsItsPluginAndRuleNeverItsValue(t *testing.T) {
	for key, want := range map[string]string{
		"meshlimit/per-user/1f3k/alice@example.com": "meshlimit/per-user",
		"meshlimit/per-user/1f3k/a/b/c":             "meshlimit/per-user",
		"plain-key":                                 "",
		"one/slash":                                 "",
	} {
		assert.Equal(t, want, tracing.KeyRule(key), key)
	}
}

func TestABadTracingConfigIsAnErrorNamingItsFlag(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    tracing.Config
		flag string
	}{
		{"an endpoint without a scheme", tracing.Config{Endpoint: "collector:4317"}, "-otlp-endpoint"},
		{"an endpoint of another scheme", tracing.Config{Endpoint: "grpc://collector:4317"}, "-otlp-endpoint"},
		{"an unknown protocol", tracing.Config{Endpoint: "http://c:4317", Protocol: "thrift"}, "-otlp-protocol"},
		{"an unknown sampler", tracing.Config{Endpoint: "http://c:4317", Sampler: "sometimes"}, "-trace-sampler"},
		{"a ratio above one", tracing.Config{Endpoint: "http://c:4317", Sampler: "traceidratio", SamplerArg: "1.5"}, "-trace-sampler-arg"},
		{"a ratio that is not a number", tracing.Config{Endpoint: "http://c:4317", Sampler: "parentbased_traceidratio", SamplerArg: "half"}, "-trace-sampler-arg"},
		{"an attribute without a value", tracing.Config{Endpoint: "http://c:4317", ResourceAttributes: "team"}, "-trace-resource-attributes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tracing.New(context.Background(), tc.c)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.flag)
		})
	}
}

func TestTracingIsOffWithoutAnEndpoint(t *testing.T) {
	tr, err := tracing.New(context.Background(), tracing.Config{Sampler: "always_on"})
	require.NoError(t, err)
	assert.Nil(t, tr)
	_, sp := tr.StartHTTP(context.Background(), tracing.FrontCheck, header("traceparent", "00-"+traceID+"-"+parentID+"-01"))
	assert.False(t, sp.Recording())
	sp.End(tracing.Decision{})
	require.NoError(t, tr.Flush(context.Background()))
	require.NoError(t, tr.Shutdown(context.Background()))
}

func TestTheEnvironmentFillsWhatTheFlagsLeaveEmpty(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	for _, tc := range []struct {
		name  string
		flags tracing.Config
		env   map[string]string
		want  tracing.Config
	}{
		{"the traces endpoint is used as is", tracing.Config{}, map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/custom", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"},
			tracing.Config{Endpoint: "http://c:4318/custom", Protocol: "http/protobuf"}},
		{"the base endpoint gets /v1/traces over HTTP", tracing.Config{}, map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318/", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"},
			tracing.Config{Endpoint: "http://c:4318/v1/traces", Protocol: "http/protobuf"}},
		{"the base endpoint is used as is over gRPC", tracing.Config{}, map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317"},
			tracing.Config{Endpoint: "http://c:4317"}},
		{"the flags win", tracing.Config{Endpoint: "http://flag:4317", Sampler: "always_on"}, map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://env:4317", "OTEL_TRACES_SAMPLER": "always_off", "OTEL_TRACES_SAMPLER_ARG": "0.5", "OTEL_SERVICE_NAME": "rl", "OTEL_RESOURCE_ATTRIBUTES": "a=b"},
			tracing.Config{Endpoint: "http://flag:4317", Sampler: "always_on", SamplerArg: "0.5", ServiceName: "rl", ResourceAttributes: "a=b"}},
		{"OTEL_SDK_DISABLED turns tracing off", tracing.Config{Endpoint: "http://flag:4317"}, map[string]string{"OTEL_SDK_DISABLED": "true"}, tracing.Config{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, tc.flags.FromEnv(env(tc.env)))
		})
	}
}

// With tracing off, a decision's span costs no allocation.
func TestADecisionWithTracingOffAllocatesNothing(t *testing.T) {
	var tr *tracing.Tracer
	h := header("traceparent", "00-"+traceID+"-"+parentID+"-01")
	ctx := context.Background()
	allocs := testing.AllocsPerRun(100, func() { oneDecision(ctx, tr, h) })
	assert.Zero(t, allocs)
}

func oneDecision(ctx context.Context, tr *tracing.Tracer, h http.Header) {
	_, sp := tr.StartHTTP(ctx, tracing.FrontCheck, h)
	var store time.Duration
	if sp.Recording() {
		store = time.Millisecond
	}
	sp.End(tracing.Decision{Rule: "p/r", Descriptors: 1, Store: store, HTTPStatus: 200})
}

func BenchmarkADecisionSpan(b *testing.B) {
	h := header("traceparent", "00-"+traceID+"-"+parentID+"-01")
	ctx := context.Background()
	b.Run("off", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			oneDecision(ctx, nil, h)
		}
	})
	b.Run("not sampled", func(b *testing.B) {
		recv := otlptest.StartGRPC(b)
		tr, err := tracing.New(ctx, tracing.Config{Endpoint: recv.Endpoint, Sampler: tracing.SamplerAlwaysOff})
		require.NoError(b, err)
		b.Cleanup(func() { _ = tr.Shutdown(ctx) })
		b.ReportAllocs()
		for b.Loop() {
			oneDecision(ctx, tr, h)
		}
	})
	b.Run("sampled", func(b *testing.B) {
		recv := otlptest.StartGRPC(b)
		tr, err := tracing.New(ctx, tracing.Config{Endpoint: recv.Endpoint})
		require.NoError(b, err)
		b.Cleanup(func() { _ = tr.Shutdown(ctx) })
		b.ReportAllocs()
		for b.Loop() {
			oneDecision(ctx, tr, h)
		}
	})
}
