package rls

import (
	"fmt"
	"testing"

	rlext "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// codecCases are requests, as bytes on the wire, of every shape the request decoder meets:
// taken, and left to proto.Unmarshal (take false).
func codecCases(t testing.TB) []struct {
	name string
	b    []byte
	take bool
} {
	marshal := func(r *pb.RateLimitRequest) []byte {
		b, err := proto.Marshal(r)
		require.NoError(t, err)
		return b
	}
	plain := marshal(req("edge", desc("remote_address", "10.0.0.1"), desc("path", "/a", "method", "GET")))
	tag := func(num protowire.Number, typ protowire.Type) []byte { return protowire.AppendTag(nil, num, typ) }
	field := func(num protowire.Number, v []byte) []byte {
		return protowire.AppendBytes(tag(num, protowire.BytesType), v)
	}
	cat := func(bs ...[]byte) []byte {
		var out []byte
		for _, b := range bs {
			out = append(out, b...)
		}
		return out
	}
	entry := field(fieldEntryKey, []byte("k"))
	return []struct {
		name string
		b    []byte
		take bool
	}{
		{"a request of two descriptors of one and two entries", plain, true},
		{"an empty request", nil, true},
		{"a request with a hits_addend of its own", marshal(&pb.RateLimitRequest{Domain: "d", HitsAddend: 7, Descriptors: []*rlext.RateLimitDescriptor{desc("a", "b")}}), true},
		{"a descriptor with a hits_addend", marshal(req("d", withHits(desc("a", "b"), 1<<40))), true},
		{"a descriptor with a hits_addend of zero", marshal(req("d", withHits(desc("a", "b"), 0))), true},
		{"a descriptor without entries", marshal(req("d", &rlext.RateLimitDescriptor{})), true},
		{"an entry with an empty key and value", marshal(req("d", desc("", ""))), true},
		{"a domain sent twice: the last one counts", cat(field(fieldRequestDomain, []byte("a")), plain, field(fieldRequestDomain, []byte("b"))), true},
		{"a key sent twice in an entry: the last one counts", cat(field(fieldRequestDomain, []byte("a")),
			field(fieldRequestDescriptors, field(fieldDescriptorEntries, cat(entry, field(fieldEntryKey, []byte("k2")))))), true},
		{"a hits_addend past 32 bits: its low 32 bits", cat(tag(fieldRequestHits, protowire.VarintType), protowire.AppendVarint(nil, 1<<33|5)), true},
		{"a UInt64Value whose value is sent twice", cat(field(fieldRequestDescriptors, field(fieldDescriptorHits,
			cat(tag(fieldUInt64Value, protowire.VarintType), protowire.AppendVarint(nil, 3), tag(fieldUInt64Value, protowire.VarintType), protowire.AppendVarint(nil, 9))))), true},
		{"a descriptor with a limit override", marshal(req("d", &rlext.RateLimitDescriptor{Entries: []*rlext.RateLimitDescriptor_Entry{{Key: "a"}},
			Limit: &rlext.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 3, Unit: typev3.RateLimitUnit_MINUTE}})), false},
		{"a descriptor with two hits_addend (merged)", cat(field(fieldRequestDescriptors, cat(
			field(fieldDescriptorHits, cat(tag(fieldUInt64Value, protowire.VarintType), protowire.AppendVarint(nil, 3))),
			field(fieldDescriptorHits, nil)))), false},
		{"an unknown field of the request", cat(plain, tag(9, protowire.VarintType), []byte{1}), false},
		{"an unknown field of an entry", cat(field(fieldRequestDescriptors, field(fieldDescriptorEntries, cat(entry, tag(5, protowire.VarintType), []byte{1})))), false},
		{"an unknown field of a UInt64Value", cat(field(fieldRequestDescriptors, field(fieldDescriptorHits, cat(tag(2, protowire.VarintType), []byte{1})))), false},
		{"the domain as a varint (a field of another wire type)", cat(tag(fieldRequestDomain, protowire.VarintType), []byte{1}), false},
		{"a domain that is not UTF-8", field(fieldRequestDomain, []byte{0xff, 'a'}), false},
		{"a value that is not UTF-8", field(fieldRequestDescriptors, field(fieldDescriptorEntries, field(fieldEntryValue, []byte{0xc3}))), false},
		{"a truncated descriptor", plain[:len(plain)-3], false},
		{"a length past the end", cat(tag(fieldRequestDomain, protowire.BytesType), []byte{9, 'a'}), false},
		{"a truncated varint", cat(tag(fieldRequestHits, protowire.VarintType), []byte{0x80}), false},
	}
}

func TestTheRequestDecoderDecodesAsProtoUnmarshal(t *testing.T) {
	for _, c := range codecCases(t) {
		t.Run(c.name, func(t *testing.T) {
			var fast pb.RateLimitRequest
			assert.Equal(t, c.take, decodeRequest(c.b, &fast), "taken by the request decoder")
			var got, want pb.RateLimitRequest
			gotErr, wantErr := unmarshalRequest(c.b, &got), proto.Unmarshal(c.b, &want)
			if wantErr != nil {
				require.Error(t, gotErr)
				assert.Equal(t, wantErr.Error(), gotErr.Error())
				return
			}
			require.NoError(t, gotErr)
			assert.True(t, proto.Equal(&want, &got), "decoded %v, proto.Unmarshal %v", &got, &want)
			if c.take {
				assert.True(t, proto.Equal(&want, &fast), "decoded %v, proto.Unmarshal %v", &fast, &want)
			}
		})
	}
}

func TestTheRequestDecoderLeavesNoStringInTheCallersBuffer(t *testing.T) {
	b, err := proto.Marshal(req("edge", desc("remote_address", "10.0.0.1")))
	require.NoError(t, err)
	var r pb.RateLimitRequest
	require.True(t, decodeRequest(b, &r))
	clear(b) // gRPC reuses its buffers
	assert.Equal(t, "edge", r.GetDomain())
	assert.Equal(t, "10.0.0.1", r.GetDescriptors()[0].GetEntries()[0].GetValue())
}

func TestADecodedDescriptorsEntriesCannotGrowIntoTheNextDescriptors(t *testing.T) {
	b, err := proto.Marshal(req("edge", desc("a", "1"), desc("b", "2")))
	require.NoError(t, err)
	var r pb.RateLimitRequest
	require.True(t, decodeRequest(b, &r))
	first := r.GetDescriptors()[0]
	first.Entries = append(first.Entries, &rlext.RateLimitDescriptor_Entry{Key: "x"})
	assert.Equal(t, "b", r.GetDescriptors()[1].GetEntries()[0].GetKey())
	r.Descriptors = append(r.Descriptors, &rlext.RateLimitDescriptor{HitsAddend: wrapperspb.UInt64(1)})
	assert.Len(t, r.GetDescriptors(), 3)
}

// FuzzDecodeRequestMatchesProtoUnmarshal requires the gRPC front's decoding of any bytes to be
// proto.Unmarshal's: the same message, or the same error.
func FuzzDecodeRequestMatchesProtoUnmarshal(f *testing.F) {
	for _, c := range codecCases(f) {
		f.Add(c.b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var got, want pb.RateLimitRequest
		gotErr, wantErr := unmarshalRequest(b, &got), proto.Unmarshal(b, &want)
		if wantErr != nil {
			require.EqualError(t, gotErr, wantErr.Error())
			return
		}
		require.NoError(t, gotErr)
		require.True(t, proto.Equal(&want, &got), "decoded %v, proto.Unmarshal %v", &got, &want)
	})
}

// BenchmarkDecodeRequest measures the gRPC front's decoding of a request of 1 and 16
// descriptors against proto.Unmarshal's.
func BenchmarkDecodeRequest(b *testing.B) {
	for _, n := range []int{1, 16} {
		raw, err := proto.Marshal(benchRequests(n)[0])
		require.NoError(b, err)
		for _, fast := range []bool{true, false} {
			b.Run(fmt.Sprintf("codec=%v/descriptors=%d", fast, n), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					var r pb.RateLimitRequest
					if fast {
						err = unmarshalRequest(raw, &r)
					} else {
						err = proto.Unmarshal(raw, &r)
					}
					if err != nil || len(r.Descriptors) != n {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
