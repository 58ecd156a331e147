package rls

import (
	"fmt"
	"unicode/utf8"

	rlext "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// requestCodec is the gRPC codec of NewGRPCServer: gRPC's own "proto" codec, but a
// RateLimitRequest of the shape Envoy sends is decoded by decodeRequest, which allocates a
// request's descriptors, entries and strings together (a handful of allocations per request
// instead of five per descriptor, and no reflection). Any other message, and any request that
// decodeRequest does not take (see there), goes to proto.Unmarshal, so every request decodes
// to the message proto.Unmarshal makes of it, or fails as it fails
// (TestTheRequestDecoderDecodesAsProtoUnmarshal, FuzzDecodeRequestMatchesProtoUnmarshal).
type requestCodec struct{ encoding.CodecV2 }

// newRequestCodec returns the requestCodec over gRPC's registered "proto" codec.
func newRequestCodec() requestCodec {
	return requestCodec{encoding.GetCodecV2(grpcproto.Name)}
}

// Unmarshal implements encoding.CodecV2. An inRequest is decoded by decodeIn and never fails
// (its err says why its message was refused), so that its refusal is the handler's
// INVALID_ARGUMENT, not the INTERNAL gRPC answers a codec's error with.
func (c requestCodec) Unmarshal(data mem.BufferSlice, v any) error {
	switch v.(type) {
	case *inRequest, *pb.RateLimitRequest:
	default:
		return c.CodecV2.Unmarshal(data, v)
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	if in, ok := v.(*inRequest); ok {
		in.decode(buf.ReadOnlyData())
		return nil
	}
	return unmarshalRequest(buf.ReadOnlyData(), v.(*pb.RateLimitRequest))
}

// inRequest is what the gRPC front decodes a ShouldRateLimit message into (shouldRateLimit in
// grpc.go): the request, or why its message was refused.
type inRequest struct {
	req pb.RateLimitRequest
	// maxDescriptors and maxEntries are the Server's bounds, set before decoding.
	maxDescriptors, maxEntries int
	// err, when set, is why the message was refused: malformed, or past the bounds.
	err error
}

// decode decodes b into in.req, or sets in.err: a message past the bounds is refused from its
// wire bytes (wireBounds) before anything of it is allocated, so that a 256 KiB message of
// 131,000 empty descriptors costs its bytes, not 50 times them; a malformed one is refused
// with proto.Unmarshal's reason.
func (in *inRequest) decode(b []byte) {
	// The usual request, of the hand decoder's shape and fewer entries in all than a descriptor
	// may have, is within the bounds as counted: decoded without a second pass.
	if nd, ne, ok := countRequest(b); ok && nd <= in.maxDescriptors && ne <= in.maxEntries {
		fillRequest(b, &in.req, nd, ne)
		return
	}
	if in.err = wireBounds(b, in.maxDescriptors, in.maxEntries); in.err != nil {
		return
	}
	if err := unmarshalRequest(b, &in.req); err != nil {
		in.err = fmt.Errorf("message: %w", err)
	}
}

// unmarshalRequest decodes b into req as proto.Unmarshal does: by decodeRequest when it takes
// b, else by proto.Unmarshal.
func unmarshalRequest(b []byte, req *pb.RateLimitRequest) error {
	if decodeRequest(b, req) {
		return nil
	}
	return proto.Unmarshal(b, req)
}

// The field numbers of the messages decodeRequest reads (rls.proto, ratelimit.proto,
// wrappers.proto).
const (
	fieldRequestDomain      = 1
	fieldRequestDescriptors = 2
	fieldRequestHits        = 3
	fieldDescriptorEntries  = 1
	fieldDescriptorHits     = 3
	fieldEntryKey           = 1
	fieldEntryValue         = 2
	fieldUInt64Value        = 1
)

// decodeRequest decodes b into req and reports true when b is a request of the usual shape:
// only known fields, each of its own wire type, valid UTF-8 strings, no descriptor with a
// limit override or two hits_addend. It reports false, leaving req untouched, for anything
// else (which proto.Unmarshal then decodes or refuses). A request's strings are substrings of
// one copy of b, its descriptors and entries two arrays of each: six allocations whatever the
// request's size.
func decodeRequest(b []byte, req *pb.RateLimitRequest) bool {
	nd, ne, ok := countRequest(b)
	if ok {
		fillRequest(b, req, nd, ne)
	}
	return ok
}

// fillRequest is decodeRequest of a request b that countRequest took, of nd descriptors and ne
// entries.
func fillRequest(b []byte, req *pb.RateLimitRequest, nd, ne int) {
	proto.Reset(req)
	d := requestFill{all: string(b)}
	if nd > 0 {
		d.descs, d.descPtrs = make([]rlext.RateLimitDescriptor, nd), make([]*rlext.RateLimitDescriptor, nd)
	}
	if ne > 0 {
		d.entries, d.entryPtrs = make([]rlext.RateLimitDescriptor_Entry, ne), make([]*rlext.RateLimitDescriptor_Entry, ne)
	}
	d.request(b, req)
}

// countRequest checks that decodeRequest takes the request b and counts its descriptors and
// entries.
func countRequest(b []byte) (descriptors, entries int, ok bool) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return 0, 0, false
		}
		b = b[n:]
		switch {
		case num == fieldRequestDomain && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 || !utf8.Valid(v) {
				return 0, 0, false
			}
			b = b[n:]
		case num == fieldRequestDescriptors && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return 0, 0, false
			}
			e, ok := countDescriptor(v)
			if !ok {
				return 0, 0, false
			}
			descriptors, entries, b = descriptors+1, entries+e, b[n:]
		case num == fieldRequestHits && typ == protowire.VarintType:
			_, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return 0, 0, false
			}
			b = b[n:]
		default:
			return 0, 0, false
		}
	}
	return descriptors, entries, true
}

// countDescriptor checks a descriptor of countRequest and counts its entries.
func countDescriptor(b []byte) (entries int, ok bool) {
	hits := false
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || typ != protowire.BytesType {
			return 0, false
		}
		v, m := protowire.ConsumeBytes(b[n:])
		if m < 0 {
			return 0, false
		}
		b = b[n+m:]
		switch {
		case num == fieldDescriptorEntries && validEntry(v):
			entries++
		case num == fieldDescriptorHits && !hits && validUInt64Value(v):
			hits = true // a second one would be merged into the first: left to proto.Unmarshal
		default:
			return 0, false
		}
	}
	return entries, true
}

// validEntry reports whether b is an entry of only keys and values of valid UTF-8.
func validEntry(b []byte) bool {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || typ != protowire.BytesType || num != fieldEntryKey && num != fieldEntryValue {
			return false
		}
		v, m := protowire.ConsumeBytes(b[n:])
		if m < 0 || !utf8.Valid(v) {
			return false
		}
		b = b[n+m:]
	}
	return true
}

// validUInt64Value reports whether b is a google.protobuf.UInt64Value of only its value.
func validUInt64Value(b []byte) bool {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || num != fieldUInt64Value || typ != protowire.VarintType {
			return false
		}
		_, m := protowire.ConsumeVarint(b[n:])
		if m < 0 {
			return false
		}
		b = b[n+m:]
	}
	return true
}

// requestFill is the second pass of decodeRequest, over a request countRequest took: the copy
// of the request's bytes its strings are cut from, and the arrays its messages are taken from.
type requestFill struct {
	all       string
	descs     []rlext.RateLimitDescriptor
	descPtrs  []*rlext.RateLimitDescriptor
	entries   []rlext.RateLimitDescriptor_Entry
	entryPtrs []*rlext.RateLimitDescriptor_Entry
	nd, ne    int // taken so far
}

// str is the string of v, a sub-slice of the request's bytes that starts at off.
func (f *requestFill) str(off int, v []byte) string { return f.all[off : off+len(v)] }

// request fills req from b, the whole request. Later values of a singular field replace
// earlier ones, as proto.Unmarshal does.
func (f *requestFill) request(b []byte, req *pb.RateLimitRequest) {
	first := f.nd
	for off := 0; off < len(b); {
		num, _, n := protowire.ConsumeTag(b[off:])
		off += n
		if num == fieldRequestHits {
			v, n := protowire.ConsumeVarint(b[off:])
			req.HitsAddend, off = uint32(v), off+n
			continue
		}
		v, n := protowire.ConsumeBytes(b[off:])
		start := off + n - len(v)
		off += n
		if num == fieldRequestDomain {
			req.Domain = f.str(start, v)
			continue
		}
		f.descriptor(v, start, take(f.descs, f.descPtrs, &f.nd))
	}
	req.Descriptors = taken(f.descPtrs, first, f.nd)
}

// descriptor fills d from b, which starts at base in the request.
func (f *requestFill) descriptor(b []byte, base int, d *rlext.RateLimitDescriptor) {
	first := f.ne
	eachField(b, base, func(num protowire.Number, v []byte, at int) {
		if num == fieldDescriptorHits {
			d.HitsAddend = &wrapperspb.UInt64Value{Value: uint64Value(v)}
			return
		}
		f.entry(v, at, take(f.entries, f.entryPtrs, &f.ne))
	})
	d.Entries = taken(f.entryPtrs, first, f.ne)
}

// take returns the next of vals (the n-th), its pointer stored in ptrs, and counts it in n.
func take[T any](vals []T, ptrs []*T, n *int) *T {
	v := &vals[*n]
	ptrs[*n] = v
	*n++
	return v
}

// taken is the pointers of ptrs taken from first up to n, with no room to grow into the next
// ones; nil when none were, as proto.Unmarshal leaves an empty repeated field.
func taken[T any](ptrs []*T, first, n int) []*T {
	if n == first {
		return nil
	}
	return ptrs[first:n:n]
}

// entry fills e from b, which starts at base in the request.
func (f *requestFill) entry(b []byte, base int, e *rlext.RateLimitDescriptor_Entry) {
	eachField(b, base, func(num protowire.Number, v []byte, at int) {
		if num == fieldEntryKey {
			e.Key = f.str(at, v)
		} else {
			e.Value = f.str(at, v)
		}
	})
}

// eachField calls do with the number and value of every field of b, a message of
// length-delimited fields only that countRequest took, and where the value starts in the
// request (b starts at base).
func eachField(b []byte, base int, do func(num protowire.Number, v []byte, at int)) {
	for off := 0; off < len(b); {
		num, _, n := protowire.ConsumeTag(b[off:])
		v, m := protowire.ConsumeBytes(b[off+n:])
		do(num, v, base+off+n+m-len(v))
		off += n + m
	}
}

// uint64Value is the value of a UInt64Value that validUInt64Value took (the last one).
func uint64Value(b []byte) uint64 {
	var v uint64
	for len(b) > 0 {
		_, _, n := protowire.ConsumeTag(b)
		x, m := protowire.ConsumeVarint(b[n:])
		v, b = x, b[n+m:]
	}
	return v
}
