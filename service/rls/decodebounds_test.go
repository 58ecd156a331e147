package rls

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// rawCodec sends and receives a gRPC message's bytes as they are (a *[]byte), so that a test's
// client allocates nothing per descriptor of what it sends.
type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(*v.(*[]byte))}, nil
}

func (rawCodec) Unmarshal(d mem.BufferSlice, v any) error {
	*v.(*[]byte) = d.Materialize()
	return nil
}

func (rawCodec) Name() string { return "proto" }

// invokeRaw sends the ShouldRateLimit message b over f's connection and returns its error.
func (f *fixture) invokeRaw(b []byte) error {
	var out []byte
	return f.conn.Invoke(context.Background(), pb.RateLimitService_ShouldRateLimit_FullMethodName, &b, &out, grpc.ForceCodecV2(rawCodec{}))
}

// allocatedPerCall is the bytes the process allocated per call of do, over calls calls.
func allocatedPerCall(calls int, do func()) float64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range calls {
		do()
	}
	runtime.ReadMemStats(&after)
	return float64(after.TotalAlloc-before.TotalAlloc) / float64(calls)
}

// emptyDescriptors is a ShouldRateLimit message of domain "edge_proxy_per_ip" and empty
// descriptors up to size bytes, after prefix.
func emptyDescriptors(prefix []byte, size int) []byte {
	b := protowire.AppendString(protowire.AppendTag(prefix, fieldRequestDomain, protowire.BytesType), "edge_proxy_per_ip")
	for len(b)+2 <= size {
		b = append(b, 0x12, 0x00)
	}
	return b
}

// Attack22 finding 3: a 256 KiB request of 131,000 empty descriptors (or one descriptor of as
// many entries) was decoded whole before its refusal, 12-17 MB allocated per call on gRPC and
// 13 MB on /json: 128 streams of them grew a replica to 1.2 GB. Now it is refused from its wire
// bytes or its JSON text, with the reason the decoded request gets, before anything of it is
// allocated: the process (client included) allocates at most 8 times the request's size per
// call, most of it the bytes received.
func TestARequestPastTheBoundsIsRefusedBeforeItsDescriptorsAreAllocated(t *testing.T) {
	store := &countingStore{Store: memoryStore(t)}
	f := newFixture(t, store, HeadersOff)
	const size = MaxMessage - 64
	wide := protowire.AppendString(protowire.AppendTag(nil, fieldRequestDomain, protowire.BytesType), "edge_proxy_per_ip")
	wide = protowire.AppendVarint(protowire.AppendTag(wide, fieldRequestDescriptors, protowire.BytesType), 2*60000)
	for range 60000 {
		wide = append(wide, 0x0a, 0x00)
	}
	unknown := protowire.AppendVarint(protowire.AppendTag(nil, 99, protowire.VarintType), 1)
	jsonDescs := `{"domain":"edge_proxy_per_ip","descriptors":[{}` + strings.Repeat(`,{}`, 80000) + `]}`
	jsonEscaped := strings.Replace(jsonDescs, `"descriptors"`, `"descr\u0069ptors"`, 1)
	jsonWide := `{"domain":"edge_proxy_per_ip","descriptors":[{"entries":[{}` + strings.Repeat(`,{}`, 80000) + `]}]}`
	for _, tc := range []struct {
		name string
		grpc []byte
		json string
		msg  string
	}{
		{name: "131,030 empty descriptors over gRPC", grpc: emptyDescriptors(nil, size), msg: "descriptors: 131030, more than the 64 allowed"},
		{name: "one descriptor of 60,000 empty entries over gRPC", grpc: wide, msg: "descriptors[0].entries: 60000, more than the 64 allowed"},
		{name: "an unknown field, then 131,029 empty descriptors, over gRPC (proto.Unmarshal's path)", grpc: emptyDescriptors(unknown, size), msg: "descriptors: 131029, more than the 64 allowed"},
		{name: "131,030 empty descriptors, then a truncated one, over gRPC", grpc: append(emptyDescriptors(nil, size), 0x12, 0x05), msg: "descriptors: 131030, more than the 64 allowed"},
		{name: "80,001 empty descriptors on /json", json: jsonDescs, msg: "descriptors: 80001, more than the 64 allowed"},
		{name: "80,001 empty descriptors on /json, their name escaped", json: jsonEscaped, msg: "descriptors: 80001, more than the 64 allowed"},
		{name: "one descriptor of 80,001 empty entries on /json", json: jsonWide, msg: "descriptors[0].entries: 80001, more than the 64 allowed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			size := len(tc.grpc) + len(tc.json)
			perCall := allocatedPerCall(5, func() {
				if tc.grpc != nil {
					err := f.invokeRaw(tc.grpc)
					assert.Equal(t, codes.InvalidArgument, status.Code(err), err)
					assert.Equal(t, tc.msg, status.Convert(err).Message())
					return
				}
				w := httptest.NewRecorder()
				f.srv.JSONHandler().ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/json", strings.NewReader(tc.json)))
				assert.Equal(t, http.StatusBadRequest, w.Code)
				assert.Equal(t, tc.msg+"\n", w.Body.String())
			})
			t.Logf("%.0f bytes allocated per call of %d bytes (%.2f times)", perCall, size, perCall/float64(size))
			assert.LessOrEqual(t, perCall, float64(8*size), "bytes allocated per refused call")
		})
	}
	assert.Zero(t, store.calls.Load(), "store calls")
}

// Attack22 finding 4: a message that does not decode was answered INTERNAL ("grpc: error
// unmarshalling request"), as gRPC answers a codec's error; it is INVALID_ARGUMENT, as API.md
// lists for every refused request, with proto.Unmarshal's reason.
func TestAMalformedMessageIsRefusedAsAnInvalidArgument(t *testing.T) {
	f := newFixture(t, memoryStore(t), HeadersOff)
	for _, tc := range []struct {
		name string
		b    []byte
	}{
		{"a truncated descriptor", []byte{0x0a, 0x01, 'd', 0x12, 0x05}},
		{"a domain of invalid UTF-8", []byte{0x0a, 0x01, 0xff}},
		{"a tag of field 0", []byte{0x00, 0x01}},
		{"an overlong varint", append([]byte{0x18}, strings.Repeat("\xff", 11)...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var want pb.RateLimitRequest
			wantErr := proto.Unmarshal(tc.b, &want)
			require.Error(t, wantErr)
			err := f.invokeRaw(tc.b)
			assert.Equal(t, codes.InvalidArgument, status.Code(err), err)
			assert.Equal(t, "message: "+wantErr.Error(), status.Convert(err).Message())
		})
	}
}

// boundsCases are requests whose bounds the wire and JSON counts must judge as the decoded
// request is judged: within, at and past the bounds of 2 descriptors of 2 entries.
func boundsCases() []*pb.RateLimitRequest {
	return []*pb.RateLimitRequest{
		req("d", desc("a", "1")),
		req("d", desc("a", "1"), desc("b", "2", "c", "3")),
		req("d", desc("a", "1"), desc("b", "2"), desc("c", "3")),
		req("d", desc("a", "1", "b", "2", "c", "3")),
		req("d", desc("a", "1"), desc("a", "1", "b", "2", "c", "3"), desc("x", "[{\"entries\":")),
		req("d", desc("a", "1"), desc("b", "2", "c", "3", "d", "4", "e", "5"), desc("x", "y")),
	}
}

// The counts from the wire bytes and the JSON text are those of the decoded request, for any
// request proto.Unmarshal or protojson.Unmarshal decodes (FuzzWireAndJSONBoundsMatchTheDecoded).
func FuzzWireAndJSONBoundsMatchTheDecoded(f *testing.F) {
	for _, r := range boundsCases() {
		b, err := proto.Marshal(r)
		require.NoError(f, err)
		f.Add(b)
		j, err := protojson.Marshal(r)
		require.NoError(f, err)
		f.Add(j)
	}
	f.Add([]byte(`{"domain":"d","descr\u0069ptors":[{"entries":[{},{},{}]}]}`))
	f.Add([]byte(`{"domain":"d","descriptors":[{"entr\u0069es":[{},{},{}]}, {}]}`))
	f.Add([]byte(` { "domain" : "d" , "descriptors" : [ { } , { "hitsAddend" : "3" } , { } ] } `))
	f.Add([]byte(`{"descriptors":null,"domain":"e\\n"}`))
	s := &Server{cfg: Config{MaxDescriptors: 2, MaxEntries: 2}}
	f.Fuzz(func(t *testing.T, b []byte) {
		var r pb.RateLimitRequest
		if proto.Unmarshal(b, &r) == nil {
			assert.Equal(t, s.checkBounds(&r), wireBounds(b, 2, 2), "wire bytes %x of %v", b, &r)
		}
		r.Reset()
		if protojson.Unmarshal(b, &r) == nil {
			assert.Equal(t, s.checkBounds(&r), jsonBounds(b, 2, 2), "JSON %s", b)
		}
	})
}

// ShouldRateLimit is served by its own handler (shouldRateLimitHandler) on pb's service
// description: reflection, when on, still lists the service and describes it from its proto
// file, and a generated client's call is answered as before.
func TestTheRateLimitServiceOfItsOwnHandlerIsStillDescribedAndServed(t *testing.T) {
	f := newFixture(t, memoryStore(t), HeadersOff)
	g := NewGRPCServer(f.srv, GRPCOptions{Reflection: true})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = g.Serve(ln) }()
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })

	stream, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(t.Context())
	require.NoError(t, err)
	require.NoError(t, stream.Send(&reflectionpb.ServerReflectionRequest{
		MessageRequest: &reflectionpb.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: pb.RateLimitService_ServiceDesc.ServiceName}}))
	resp, err := stream.Recv()
	require.NoError(t, err)
	require.NotEmpty(t, resp.GetFileDescriptorResponse().GetFileDescriptorProto(), "%v", resp.GetErrorResponse())
	require.NoError(t, stream.Send(&reflectionpb.ServerReflectionRequest{
		MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{ListServices: ""}}))
	resp, err = stream.Recv()
	require.NoError(t, err)
	var names []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	assert.Contains(t, names, pb.RateLimitService_ServiceDesc.ServiceName)

	out, err := pb.NewRateLimitServiceClient(conn).ShouldRateLimit(t.Context(), req("edge_proxy_per_ip", desc("remote_address", "10.0.0.1")))
	require.NoError(t, err)
	assert.Equal(t, pb.RateLimitResponse_OK, out.GetOverallCode())
}
