package e2e

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/meshlimit/meshlimit/internal/envoyhost"
	"github.com/meshlimit/meshlimit/internal/otlptest"
	"github.com/meshlimit/meshlimit/service"
	"github.com/meshlimit/meshlimit/service/memstore"
	"github.com/meshlimit/meshlimit/service/tracing"
	"github.com/meshlimit/meshlimit/wire"
)

// The request's trace context reaches the decision service on the filter's call, and the
// service's span joins the request's trace.

const (
	e2eTraceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	e2eSpanID  = "00f067aa0ba902b7" // the span of the proxy that forwarded the request
)

// tracedService is the decision service (in-memory store) with tracing to an in-process OTLP
// receiver, recording the headers of every check it is sent.
type tracedService struct {
	srv    *httptest.Server
	tracer *tracing.Tracer
	recv   *otlptest.Receiver
	mu     sync.Mutex
	seen   []http.Header
}

func startTracedService(t *testing.T, clock *envoyhost.Clock, sampler string) *tracedService {
	t.Helper()
	d := &tracedService{recv: otlptest.StartGRPC(t)}
	var err error
	d.tracer, err = tracing.New(context.Background(), tracing.Config{Endpoint: d.recv.Endpoint, Sampler: sampler})
	require.NoError(t, err)
	t.Cleanup(func() { _ = d.tracer.Shutdown(context.Background()) })
	store := memstore.New(memstore.Config{SweepInterval: -1, Clock: clock.Now})
	t.Cleanup(func() { _ = store.Close() })
	h, err := service.NewHandler(service.Config{Store: store, Timeout: time.Second, Tracer: d.tracer})
	require.NoError(t, err)
	d.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == wire.Path {
			d.mu.Lock()
			d.seen = append(d.seen, r.Header.Clone())
			d.mu.Unlock()
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(d.srv.Close)
	return d
}

func (d *tracedService) headers() []http.Header {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]http.Header(nil), d.seen...)
}

func tracedProxy(t *testing.T, d *tracedService, clock *envoyhost.Clock) *envoyhost.Plugin {
	cfg := globalConfig(`{"name":"per-user","scope":"global","key":[{"header":"x-user"}],"limits":[{"name":"user","rate":"1/m"}]}`)
	return load(t, module(t, "meshlimit"), cfg, 1, func(c *envoyhost.Config) {
		c.Clusters = map[string]string{"outbound|8081||meshlimit.meshlimit.svc.cluster.local": strings.TrimPrefix(d.srv.URL, "http://")}
		c.Clock = clock
	})
}

func traceparent(flags string) [2]string {
	return [2]string{"traceparent", "00-" + e2eTraceID + "-" + e2eSpanID + "-" + flags}
}

func TestTheServiceReceivesTheRequestsTraceContextOnTheFiltersCall(t *testing.T) {
	clock := envoyhost.NewClock(epoch)
	d := startTracedService(t, clock, "")
	p := tracedProxy(t, d, clock)
	vm := p.VMs()[0]
	res := roundTrip(t, vm, get("api.example", "/orders", "192.0.2.1", [2]string{"x-user", "alice"}, traceparent("01"),
		[2]string{"tracestate", "congo=t61rcWkgMzE"}, [2]string{"x-request-id", "3e1b8c5a-2f4d-4a6b-9c7e-1d2f3a4b5c6d"},
		[2]string{"x-b3-traceid", e2eTraceID}, [2]string{"x-b3-spanid", e2eSpanID}, [2]string{"x-b3-sampled", "1"}))
	require.Nil(t, res.LocalReply)
	seen := d.headers()
	require.Len(t, seen, 1)
	h := seen[0]
	assert.Equal(t, "00-"+e2eTraceID+"-"+e2eSpanID+"-01", h.Get("traceparent"))
	assert.Equal(t, "congo=t61rcWkgMzE", h.Get("tracestate"))
	assert.Equal(t, "3e1b8c5a-2f4d-4a6b-9c7e-1d2f3a4b5c6d", h.Get("x-request-id"))
	assert.Equal(t, e2eTraceID, h.Get("x-b3-traceid"))
	assert.Equal(t, e2eSpanID, h.Get("x-b3-spanid"))
	assert.Equal(t, "1", h.Get("x-b3-sampled"))
	assert.Empty(t, h.Get("x-user"), "no other header of the request")
	assert.Zero(t, p.PollOneoffCalls())
}

func TestTheDecisionSpanJoinsTheTraceOfTheProxiedRequest(t *testing.T) {
	clock := envoyhost.NewClock(epoch)
	d := startTracedService(t, clock, "")
	vm := tracedProxy(t, d, clock).VMs()[0]
	require.Nil(t, roundTrip(t, vm, get("api.example", "/orders", "192.0.2.1", [2]string{"x-user", "alice"}, traceparent("01"))).LocalReply)
	require.Nil(t, roundTrip(t, vm, get("api.example", "/orders", "192.0.2.1", [2]string{"x-user", "bob"},
		[2]string{"b3", e2eTraceID + "-" + e2eSpanID + "-1"})).LocalReply)
	require.NoError(t, d.tracer.Flush(context.Background()))
	spans := d.recv.WaitSpans(t, 2)
	require.Len(t, spans, 2)
	for _, s := range spans {
		assert.Equal(t, "POST /v1/check", s.Name)
		assert.Equal(t, e2eTraceID, s.TraceID)
		assert.Equal(t, e2eSpanID, s.ParentSpanID, "the service's span is a child of the proxy's")
		assert.Equal(t, tracepb.Span_SPAN_KIND_SERVER, s.Kind)
		assert.Equal(t, "istio-system.meshlimit/per-user", s.Attributes[tracing.AttrRule])
		assert.Equal(t, int64(1), s.Attributes[tracing.AttrDescriptors])
		assert.Equal(t, "allowed", s.Attributes[tracing.AttrOutcome])
		assert.Greater(t, s.Attributes[tracing.AttrStoreLatency], 0.0)
	}
}

// A request the proxy did not sample (traceparent flags 00) gets no span; the sampled request
// after it proves the export ran (the exporter sends spans in order).
func TestARequestTheProxyDidNotSampleGetsNoServiceSpan(t *testing.T) {
	clock := envoyhost.NewClock(epoch)
	d := startTracedService(t, clock, "")
	vm := tracedProxy(t, d, clock).VMs()[0]
	require.Nil(t, roundTrip(t, vm, get("api.example", "/orders", "192.0.2.1", [2]string{"x-user", "alice"}, traceparent("00"))).LocalReply)
	require.NoError(t, d.tracer.Flush(context.Background()))
	require.NotNil(t, roundTrip(t, vm, get("api.example", "/orders", "192.0.2.1", [2]string{"x-user", "alice"}, traceparent("01"))).LocalReply, "the second request of alice is over 1/m")
	require.NoError(t, d.tracer.Flush(context.Background()))
	spans := d.recv.WaitSpans(t, 1)
	require.Len(t, spans, 1)
	assert.Equal(t, "denied", spans[0].Attributes[tracing.AttrOutcome])
	require.Len(t, d.headers(), 2, "both requests were decided by the service")
}
