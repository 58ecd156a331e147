// Package otlptest runs an in-process OTLP trace receiver for tests, over gRPC (StartGRPC) or
// HTTP with protobuf bodies (StartHTTP), on a 127.0.0.1 port the kernel chooses, stopped when the
// test ends. It keeps every span it receives, flattened to what a test asserts on (Span), and
// lets a test wait for spans without a wall-clock threshold of its own (WaitSpans waits on
// arrivals, bounded only by a generous limit that turns a hang into a failure).
package otlptest

import (
	"bytes"
	"context"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	collectorpb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// Span is a received span: ids in lowercase hex, attributes by key (strings, int64s,
// float64s and bools as the OTLP value holds them).
type Span struct {
	Name          string
	TraceID       string
	SpanID        string
	ParentSpanID  string // "" for a root span
	TraceState    string
	Kind          tracepb.Span_SpanKind
	Attributes    map[string]any
	StatusCode    tracepb.Status_StatusCode
	StatusMessage string
	Resource      map[string]any // the attributes of the span's resource
	Scope         string         // the instrumentation scope's name
}

// Receiver is a running OTLP receiver.
type Receiver struct {
	// Endpoint is the URL to export to: http://127.0.0.1:port.
	Endpoint string

	mu      sync.Mutex
	spans   []Span
	arrived chan struct{} // closed and replaced on every export
	answer  int           // StartHTTPAnswering: bytes of junk each export is answered with
}

// waitLimit bounds WaitSpans: far beyond any export on a loaded machine, it only turns a hang
// into a failure.
const waitLimit = 2 * time.Minute

// StartGRPC starts a receiver of OTLP over gRPC (collector TraceService/Export).
func StartGRPC(t testing.TB) *Receiver {
	t.Helper()
	r, ln := newReceiver(t)
	g := grpc.NewServer()
	collectorpb.RegisterTraceServiceServer(g, grpcService{r: r})
	go func() { _ = g.Serve(ln) }()
	t.Cleanup(g.Stop)
	return r
}

// StartHTTP starts a receiver of OTLP over HTTP: POST /v1/traces with a protobuf body.
func StartHTTP(t testing.TB) *Receiver {
	t.Helper()
	r, ln := newReceiver(t)
	srv := &http.Server{Handler: http.HandlerFunc(r.serveHTTP), ReadHeaderTimeout: time.Minute}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return r
}

// StartHTTPAnswering starts a receiver of OTLP over HTTP, like StartHTTP, that answers every
// export with n bytes of junk instead of an ExportTraceServiceResponse: a collector (or anything
// on the path of a plaintext endpoint) that tries to make the exporter buffer a huge answer.
func StartHTTPAnswering(t testing.TB, n int) *Receiver {
	t.Helper()
	r := StartHTTP(t)
	r.answer = n
	return r
}

func newReceiver(t testing.TB) (*Receiver, net.Listener) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	return &Receiver{Endpoint: "http://" + ln.Addr().String(), arrived: make(chan struct{})}, ln
}

type grpcService struct {
	collectorpb.UnimplementedTraceServiceServer
	r *Receiver
}

func (s grpcService) Export(_ context.Context, req *collectorpb.ExportTraceServiceRequest) (*collectorpb.ExportTraceServiceResponse, error) {
	s.r.add(req)
	return &collectorpb.ExportTraceServiceResponse{}, nil
}

func (r *Receiver) serveHTTP(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost || req.URL.Path != "/v1/traces" {
		http.Error(w, "want POST /v1/traces", http.StatusNotFound)
		return
	}
	body, err := io.ReadAll(req.Body)
	var msg collectorpb.ExportTraceServiceRequest
	if err == nil {
		err = proto.Unmarshal(body, &msg)
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.add(&msg)
	w.Header().Set("Content-Type", "application/x-protobuf")
	if r.answer > 0 {
		writeJunk(w, junk, r.answer)
		return
	}
	out, _ := proto.Marshal(&collectorpb.ExportTraceServiceResponse{})
	_, _ = w.Write(out)
}

// junk is what writeJunk writes: 0xff is not a valid protobuf message. It is allocated once, so
// that a test measuring what the exporter allocates does not count the receiver's writes.
var junk = bytes.Repeat([]byte{0xff}, 1<<20)

// writeJunk writes n bytes of piece over and over, stopping when the client goes away.
func writeJunk(w io.Writer, piece []byte, n int) {
	for n > 0 {
		m := min(n, len(piece))
		if _, err := w.Write(piece[:m]); err != nil {
			return
		}
		n -= m
	}
}

func (r *Receiver) add(req *collectorpb.ExportTraceServiceRequest) {
	var got []Span
	for _, rs := range req.GetResourceSpans() {
		res := attributes(rs.GetResource().GetAttributes())
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				got = append(got, Span{
					Name: s.GetName(), TraceID: hex.EncodeToString(s.GetTraceId()), SpanID: hex.EncodeToString(s.GetSpanId()),
					ParentSpanID: hex.EncodeToString(s.GetParentSpanId()), TraceState: s.GetTraceState(), Kind: s.GetKind(),
					Attributes: attributes(s.GetAttributes()), StatusCode: s.GetStatus().GetCode(),
					StatusMessage: s.GetStatus().GetMessage(), Resource: res, Scope: ss.GetScope().GetName(),
				})
			}
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.spans = append(r.spans, got...)
	close(r.arrived)
	r.arrived = make(chan struct{})
}

func attributes(kvs []*commonpb.KeyValue) map[string]any {
	m := make(map[string]any, len(kvs))
	for _, kv := range kvs {
		switch v := kv.GetValue().GetValue().(type) {
		case *commonpb.AnyValue_StringValue:
			m[kv.GetKey()] = v.StringValue
		case *commonpb.AnyValue_IntValue:
			m[kv.GetKey()] = v.IntValue
		case *commonpb.AnyValue_DoubleValue:
			m[kv.GetKey()] = v.DoubleValue
		case *commonpb.AnyValue_BoolValue:
			m[kv.GetKey()] = v.BoolValue
		default:
			m[kv.GetKey()] = kv.GetValue().String()
		}
	}
	return m
}

// Spans returns the spans received so far.
func (r *Receiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Span(nil), r.spans...)
}

// WaitSpans waits until n spans have arrived and returns them all; it fails the test when they
// do not come within a limit far beyond any export (two minutes).
func (r *Receiver) WaitSpans(t testing.TB, n int) []Span {
	t.Helper()
	limit := time.NewTimer(waitLimit)
	defer limit.Stop()
	for {
		r.mu.Lock()
		spans, arrived := append([]Span(nil), r.spans...), r.arrived
		r.mu.Unlock()
		if len(spans) >= n {
			return spans
		}
		select {
		case <-arrived:
		case <-limit.C:
			require.FailNowf(t, "otlptest: spans did not arrive", "want %d spans, got %d: %+v", n, len(spans), spans)
		}
	}
}
