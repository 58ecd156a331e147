package service_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/meshlimit/meshlimit/algorithms"
	"github.com/meshlimit/meshlimit/internal/otlptest"
	"github.com/meshlimit/meshlimit/service"
	"github.com/meshlimit/meshlimit/service/tracing"
)

const (
	traceID  = "4bf92f3577b34da6a3ce929d0e0e4736"
	parentID = "00f067aa0ba902b7"
)

func newTracedHandler(t *testing.T, store service.Store) (*service.Handler, *tracing.Tracer, *otlptest.Receiver) {
	t.Helper()
	recv := otlptest.StartGRPC(t)
	tr, err := tracing.New(context.Background(), tracing.Config{Endpoint: recv.Endpoint})
	require.NoError(t, err)
	t.Cleanup(func() { _ = tr.Shutdown(context.Background()) })
	return newTestHandler(t, service.Config{Store: store, Tracer: tr}), tr, recv
}

func TestACheckIsASpanOfTheTraceItsTraceparentCarries(t *testing.T) {
	h, tr, recv := newTracedHandler(t, nil)
	body := `{"descriptors":[` +
		`{"key":"meshlimit/per-ip/1f/192.0.2.1","algorithm":"fixed_window","quota":5,"window_ms":60000},` +
		`{"key":"meshlimit/per-user/2g/alice","algorithm":"fixed_window","quota":1,"cost":2,"window_ms":60000},` +
		`{"key":"meshlimit/per-path/3h/orders","algorithm":"fixed_window","quota":5,"window_ms":60000}]}`
	code, answer := serve(h, "POST", "/v1/check", body, "traceparent", "00-"+traceID+"-"+parentID+"-01")
	require.Equal(t, 200, code, answer)
	require.NoError(t, tr.Flush(context.Background()))
	s := recv.WaitSpans(t, 1)[0]
	assert.Equal(t, "POST /v1/check", s.Name)
	assert.Equal(t, traceID, s.TraceID)
	assert.Equal(t, parentID, s.ParentSpanID)
	assert.Equal(t, tracepb.Span_SPAN_KIND_SERVER, s.Kind)
	assert.Equal(t, "meshlimit/per-user", s.Attributes[tracing.AttrRule], "the rule that denied, never the key's value")
	assert.Equal(t, int64(3), s.Attributes[tracing.AttrDescriptors])
	assert.Equal(t, "denied", s.Attributes[tracing.AttrOutcome])
	assert.Equal(t, int64(200), s.Attributes[tracing.AttrHTTPStatus])
	assert.Greater(t, s.Attributes[tracing.AttrStoreLatency], 0.0)
	for k, v := range s.Attributes {
		assert.NotContains(t, fmt.Sprint(v), "alice", k)
	}
}

func TestACheckWhoseStoreFailsIsASpanWithStatusError(t *testing.T) {
	h, tr, recv := newTracedHandler(t, downStore{newMemoryStore(t)})
	code, _ := serve(h, "POST", "/v1/check", `{"descriptors":[{"key":"p/r/1/v","algorithm":"token_bucket","quota":5,"window_ms":1000}]}`,
		"b3", traceID+"-"+parentID+"-1")
	require.Equal(t, 503, code)
	require.NoError(t, tr.Flush(context.Background()))
	s := recv.WaitSpans(t, 1)[0]
	assert.Equal(t, parentID, s.ParentSpanID)
	assert.Equal(t, tracepb.Status_STATUS_CODE_ERROR, s.StatusCode)
	assert.Equal(t, "redis: connection refused", s.StatusMessage)
	assert.Equal(t, "error", s.Attributes[tracing.AttrOutcome])
	assert.Equal(t, "store", s.Attributes[tracing.AttrErrorType])
	assert.Equal(t, int64(503), s.Attributes[tracing.AttrHTTPStatus])
}

func TestACheckTheServiceRefusesIsASpanOfAnInvalidRequest(t *testing.T) {
	h, tr, recv := newTracedHandler(t, nil)
	code, _ := serve(h, "POST", "/v1/check", `{"descriptors":[]}`, "traceparent", "00-"+traceID+"-"+parentID+"-01")
	require.Equal(t, 400, code)
	require.NoError(t, tr.Flush(context.Background()))
	s := recv.WaitSpans(t, 1)[0]
	assert.Equal(t, "invalid", s.Attributes[tracing.AttrOutcome])
	assert.Equal(t, tracepb.Status_STATUS_CODE_UNSET, s.StatusCode)
}

// downStore fails every decision as a Redis that went away does.
type downStore struct{ service.Store }

func (downStore) Decide(context.Context, service.Request) (algorithms.Decision, error) {
	return algorithms.Decision{}, errors.New("redis: connection refused")
}

// BenchmarkACheckTraced is BenchmarkACheck with tracing on: every check sampled, or none.
func BenchmarkACheckTraced(b *testing.B) {
	for _, sampler := range []string{tracing.SamplerAlwaysOff, tracing.SamplerParentBasedAlwaysOn} {
		b.Run(sampler, func(b *testing.B) {
			recv := otlptest.StartGRPC(b)
			tr, err := tracing.New(context.Background(), tracing.Config{Endpoint: recv.Endpoint, Sampler: sampler})
			require.NoError(b, err)
			b.Cleanup(func() { _ = tr.Shutdown(context.Background()) })
			benchmarkChecks(b, newTestHandler(b, service.Config{Tracer: tr}))
		})
	}
}
