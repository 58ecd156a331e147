package rls

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

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

func tracedFixture(t *testing.T, cfg Config) (*fixture, *tracing.Tracer, *otlptest.Receiver) {
	t.Helper()
	recv := otlptest.StartGRPC(t)
	tr, err := tracing.New(context.Background(), tracing.Config{Endpoint: recv.Endpoint})
	require.NoError(t, err)
	t.Cleanup(func() { _ = tr.Shutdown(context.Background()) })
	cfg.Tracer = tr
	return newFixtureOf(t, cfg), tr, recv
}

func TestAShouldRateLimitCallIsASpanOfTheTraceItsMetadataCarries(t *testing.T) {
	f, tr, recv := tracedFixture(t, Config{Store: memoryStore(t)})
	ctx := metadata.AppendToOutgoingContext(context.Background(), "traceparent", "00-"+traceID+"-"+parentID+"-01")
	_, err := f.client.ShouldRateLimit(ctx, req("mongo_cps", desc("database", "users"), desc("database", "nope")))
	require.NoError(t, err)
	require.NoError(t, tr.Flush(context.Background()))
	s := recv.WaitSpans(t, 1)[0]
	assert.Equal(t, "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", s.Name)
	assert.Equal(t, traceID, s.TraceID)
	assert.Equal(t, parentID, s.ParentSpanID)
	assert.Equal(t, tracepb.Span_SPAN_KIND_SERVER, s.Kind)
	assert.Equal(t, "mongo_cps", s.Attributes[tracing.AttrDomain])
	assert.Equal(t, int64(2), s.Attributes[tracing.AttrDescriptors])
	assert.Equal(t, "allowed", s.Attributes[tracing.AttrOutcome])
	assert.Equal(t, int64(0), s.Attributes[tracing.AttrGRPCStatus])
	assert.Greater(t, s.Attributes[tracing.AttrStoreLatency], 0.0)
}

func TestAShouldRateLimitCallWhoseStoreFailsIsASpanWithStatusError(t *testing.T) {
	f, tr, recv := tracedFixture(t, Config{Store: failingStore{memoryStore(t)}})
	_, err := f.client.ShouldRateLimit(context.Background(), req("mongo_cps", desc("database", "users")))
	require.Error(t, err)
	require.NoError(t, tr.Flush(context.Background()))
	s := recv.WaitSpans(t, 1)[0]
	assert.Equal(t, tracepb.Status_STATUS_CODE_ERROR, s.StatusCode)
	assert.Equal(t, "error", s.Attributes[tracing.AttrOutcome])
	assert.Equal(t, "store", s.Attributes[tracing.AttrErrorType])
	assert.Equal(t, int64(14), s.Attributes[tracing.AttrGRPCStatus], "Unavailable")
	assert.Empty(t, s.ParentSpanID, "a call without a trace context starts a trace")
}

func TestAJSONRequestIsASpanOfItsB3Trace(t *testing.T) {
	f, tr, recv := tracedFixture(t, Config{Store: memoryStore(t)})
	ts := httptest.NewServer(f.srv.JSONHandler())
	t.Cleanup(ts.Close)
	post := func(body string, h ...string) {
		r, err := http.NewRequest(http.MethodPost, ts.URL+"/json", strings.NewReader(body))
		require.NoError(t, err)
		for i := 0; i < len(h); i += 2 {
			r.Header.Set(h[i], h[i+1])
		}
		resp, err := http.DefaultClient.Do(r)
		require.NoError(t, err)
		resp.Body.Close()
	}
	post(`{"domain":"edge_proxy_per_ip","descriptors":[{"entries":[{"key":"remote_address","value":"50.0.0.5"}]}]}`,
		"x-b3-traceid", traceID, "x-b3-spanid", parentID, "x-b3-sampled", "1")
	post(`{"domain":""}`, "b3", traceID+"-"+parentID+"-1")
	require.NoError(t, tr.Flush(context.Background()))
	spans := recv.WaitSpans(t, 2)
	denied, invalid := spans[0], spans[1]
	assert.Equal(t, "POST /json", denied.Name)
	assert.Equal(t, parentID, denied.ParentSpanID)
	assert.Equal(t, map[string]any{tracing.AttrFront: "json", tracing.AttrDomain: "edge_proxy_per_ip", tracing.AttrDescriptors: int64(1),
		tracing.AttrOutcome: "denied", tracing.AttrHTTPStatus: int64(429), tracing.AttrStoreLatency: denied.Attributes[tracing.AttrStoreLatency]}, denied.Attributes)
	assert.Equal(t, parentID, invalid.ParentSpanID)
	assert.Equal(t, "invalid", invalid.Attributes[tracing.AttrOutcome])
	assert.Equal(t, int64(400), invalid.Attributes[tracing.AttrHTTPStatus])
	assert.Equal(t, tracepb.Status_STATUS_CODE_UNSET, invalid.StatusCode, "a refused request is the client's error, not the service's")
}
