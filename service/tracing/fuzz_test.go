package tracing

import (
	"context"
	"net/http"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"google.golang.org/grpc/metadata"
)

// FuzzTraceHeaders feeds arbitrary trace headers to both carriers: extraction never panics, a
// value over MaxHeaderBytes never becomes the parent, and a parent, when there is one, is valid.
// The tracer exports nothing.
func FuzzTraceHeaders(f *testing.F) {
	f.Add("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "congo=t61rcWkgMzE", "4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1", "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7")
	f.Add("ff-zz", "a=b,,,c", "0", "", "")
	f.Add(strings.Repeat("0", 600), strings.Repeat("k=v,", 200), "d", "x", "y")
	tr := newTracer(sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample())))
	f.Cleanup(func() { _ = tr.provider.Shutdown(context.Background()) })
	f.Fuzz(func(t *testing.T, tp, ts, b3, xTrace, xSpan string) {
		h := http.Header{}
		md := metadata.MD{}
		for k, v := range map[string]string{"traceparent": tp, "tracestate": ts, "b3": b3, "x-b3-traceid": xTrace, "x-b3-spanid": xSpan, "x-b3-sampled": "1"} {
			h.Set(k, v)
			md.Set(k, v)
		}
		_, hs := tr.StartHTTP(context.Background(), FrontCheck, h)
		_, gs := tr.StartGRPC(metadata.NewIncomingContext(context.Background(), md))
		for _, sp := range []Span{hs, gs} {
			ro, ok := sp.s.(sdktrace.ReadOnlySpan)
			if !ok {
				t.Fatal("always_on: every span records")
			}
			parent := ro.Parent()
			if parent.IsValid() && !parent.IsRemote() {
				t.Fatalf("a parent that did not come from the headers: %v", parent)
			}
			if parent.IsValid() && len(tp) > MaxHeaderBytes && len(b3) > MaxHeaderBytes && (len(xTrace) > MaxHeaderBytes || len(xSpan) > MaxHeaderBytes) {
				t.Fatalf("a parent from headers longer than %d bytes", MaxHeaderBytes)
			}
			if len(ro.SpanContext().TraceState().String()) > MaxHeaderBytes {
				t.Fatal("a tracestate longer than the bound")
			}
			sp.End(Decision{Descriptors: 1})
		}
	})
}

// FuzzResourceAttributes: any text parses to at most maxAttributes pairs, or an error naming
// the flag; never a panic.
func FuzzResourceAttributes(f *testing.F) {
	f.Add("deployment.environment=prod,team=edge%20platform")
	f.Add("=,==,%zz")
	f.Fuzz(func(t *testing.T, s string) {
		attrs, err := parseAttributes(s)
		if err != nil {
			if !strings.Contains(err.Error(), "-trace-resource-attributes") {
				t.Fatalf("an error not naming the flag: %v", err)
			}
			return
		}
		if len(attrs) > maxAttributes {
			t.Fatalf("%d attributes", len(attrs))
		}
		for _, a := range attrs {
			if a[0] == "" {
				t.Fatal("an empty key")
			}
		}
	})
}
