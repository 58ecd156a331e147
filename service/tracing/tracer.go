package tracing

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"go.opentelemetry.io/contrib/propagators/b3"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// instrumentation is the name of the tracer (the instrumentation scope of every span).
const instrumentation = "github.com/meshlimit/meshlimit/service"

// Tracer starts the decision spans and exports them. A nil *Tracer is tracing off: every method
// is then a no-op that allocates nothing. A Tracer is safe for concurrent use.
type Tracer struct {
	provider *sdktrace.TracerProvider
	tracer   trace.Tracer
	prop     propagation.TextMapPropagator
	// followsParent is true for the parentbased samplers: a request its caller did not sample,
	// B3's deny without ids included (b3deny), then gets no span.
	followsParent bool
	errs          *errorLog
}

// New returns the Tracer of c, or nil when c is not Enabled. It returns an error, naming the
// flag, for a Config that does not check; it does not contact the endpoint (the exporter
// connects and retries in the background, and drops spans it cannot send).
func New(ctx context.Context, c Config) (*Tracer, error) {
	if !c.Enabled() {
		return nil, nil
	}
	s, err := c.check()
	if err != nil {
		return nil, err
	}
	exp, err := newExporter(ctx, s)
	if err != nil {
		return nil, fmt.Errorf("-otlp-endpoint: %w", err)
	}
	attrs := []attribute.KeyValue{attribute.String("service.name", s.name)}
	for _, a := range s.attrs {
		if a[0] != "service.name" || c.ServiceName == "" {
			attrs = append(attrs, attribute.String(a[0], a[1]))
		}
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(attrs...))
	if err != nil {
		return nil, fmt.Errorf("-trace-resource-attributes: %w", err)
	}
	p := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sampler(s)),
	)
	t := newTracer(p)
	t.followsParent = strings.HasPrefix(s.sampler, "parentbased_")
	t.errs = newErrorLog(slog.Default(), ErrorLogEvery, time.Now)
	// The SDK reports export failures to a process-wide handler: the last Tracer made gets them.
	otel.SetErrorHandler(t.errs)
	return t, nil
}

// LogErrors sends the OpenTelemetry errors (exports that failed) to log, one line per
// ErrorLogEvery at most; before it, they go to slog.Default().
func (t *Tracer) LogErrors(log *slog.Logger) {
	if t != nil {
		t.errs.setLogger(log)
	}
}

// ExportFailures returns the number of OpenTelemetry errors so far (exports that failed): the
// meshlimit_trace_export_failures_total counter. It is 0 for a nil Tracer.
func (t *Tracer) ExportFailures() uint64 {
	if t == nil {
		return 0
	}
	return t.errs.total.Load()
}

// newTracer returns the Tracer over p.
func newTracer(p *sdktrace.TracerProvider) *Tracer {
	return &Tracer{
		provider: p,
		tracer:   p.Tracer(instrumentation),
		// B3 first: when a request carries both, its traceparent wins.
		prop: propagation.NewCompositeTextMapPropagator(b3.New(), propagation.TraceContext{}),
	}
}

// MaxAnswerBytes bounds what the OTLP/HTTP exporter reads of a collector's answer to an export
// (an ExportTraceServiceResponse: a few bytes, or a partial-success message): a longer answer
// fails the export (GHSA-w8rr-5gcm-pp58). The SDK's default is 4 MiB.
const MaxAnswerBytes = 64 << 10

func newExporter(ctx context.Context, s settings) (sdktrace.SpanExporter, error) {
	if s.http {
		return otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(s.endpoint.String()),
			otlptracehttp.WithMaxResponseSize(MaxAnswerBytes))
	}
	return otlptracegrpc.New(ctx, otlptracegrpc.WithEndpointURL(s.endpoint.String()))
}

func sampler(s settings) sdktrace.Sampler {
	switch s.sampler {
	case SamplerAlwaysOn:
		return sdktrace.AlwaysSample()
	case SamplerAlwaysOff:
		return sdktrace.NeverSample()
	case SamplerTraceIDRatio:
		return sdktrace.TraceIDRatioBased(s.ratio)
	case SamplerParentBasedAlwaysOff:
		return sdktrace.ParentBased(sdktrace.NeverSample())
	case SamplerParentBasedTraceIDRatio:
		return sdktrace.ParentBased(sdktrace.TraceIDRatioBased(s.ratio))
	}
	return sdktrace.ParentBased(sdktrace.AlwaysSample())
}

// Flush exports the spans ended so far, waiting until ctx ends at most. A failed export is
// counted and logged as the batcher's are, and returned.
func (t *Tracer) Flush(ctx context.Context) error {
	if t == nil {
		return nil
	}
	err := t.provider.ForceFlush(ctx)
	if err != nil {
		t.errs.Handle(err)
	}
	return err
}

// Shutdown exports the spans ended so far and stops the exporter, waiting until ctx ends at
// most; the Tracer then starts spans that are not exported.
func (t *Tracer) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	return t.provider.Shutdown(ctx)
}
