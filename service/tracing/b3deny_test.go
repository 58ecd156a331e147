package tracing_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/metadata"

	"github.com/meshlimit/meshlimit/internal/otlptest"
	"github.com/meshlimit/meshlimit/service/tracing"
)

// B3 says "not sampled" without ids too: `b3: 0`, or `x-b3-sampled: 0` alone. Such a request
// gets no span, on the HTTP fronts and over gRPC metadata. After each, a sampled request (its
// descriptors numbered) proves the export ran: spans are exported in order.
func TestARequestB3MarksNotSampledWithoutIdsGetsNoSpan(t *testing.T) {
	for name, kv := range map[string][]string{
		"b3: 0":                 {"b3", "0"},
		"x-b3-sampled: 0 alone": {"x-b3-sampled", "0"},
		"x-b3-sampled: false":   {"x-b3-sampled", "false"},
	} {
		t.Run(name+" over HTTP", func(t *testing.T) {
			recv := otlptest.StartGRPC(t)
			tr := newTracer(t, tracing.Config{Endpoint: recv.Endpoint})
			decide(t, tr, header(kv...), tracing.Decision{Descriptors: 1})
			decide(t, tr, header(), tracing.Decision{Descriptors: 2})
			spans := recv.WaitSpans(t, 1)
			require.Len(t, spans, 1)
			assert.Equal(t, int64(2), spans[0].Attributes[tracing.AttrDescriptors])
		})
		t.Run(name+" over gRPC", func(t *testing.T) {
			recv := otlptest.StartGRPC(t)
			tr := newTracer(t, tracing.Config{Endpoint: recv.Endpoint})
			for i, md := range []metadata.MD{metadata.Pairs(kv...), metadata.MD{}} {
				ctx, sp := tr.StartGRPC(metadata.NewIncomingContext(context.Background(), md))
				assert.Equal(t, i == 1, sp.Recording())
				sp.End(tracing.Decision{Descriptors: i + 1})
				_ = ctx
			}
			require.NoError(t, tr.Flush(context.Background()))
			spans := recv.WaitSpans(t, 1)
			require.Len(t, spans, 1)
			assert.Equal(t, int64(2), spans[0].Attributes[tracing.AttrDescriptors])
		})
	}
}

// A deny without ids does not override a trace context that is there: a sampled traceparent
// still makes a span of its trace.
func TestAB3DenyBesideASampledTraceparentKeepsTheTraceparentsSpan(t *testing.T) {
	recv := otlptest.StartGRPC(t)
	tr := newTracer(t, tracing.Config{Endpoint: recv.Endpoint})
	h := http.Header{}
	h.Set("b3", "0")
	h.Set("traceparent", "00-"+traceID+"-"+parentID+"-01")
	decide(t, tr, h, tracing.Decision{Descriptors: 1})
	s := recv.WaitSpans(t, 1)[0]
	assert.Equal(t, parentID, s.ParentSpanID)
}
