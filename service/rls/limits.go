package rls

import (
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// The bounds of one RLS call, on every front (gRPC ShouldRateLimit and /json). A call past
// them is refused before any descriptor is matched or counted, so the work of one call is
// proportional to what it may ask: at most MaxDescriptors store calls of keys built from at
// most MaxMessage bytes.
const (
	// DefaultMaxDescriptors bounds the descriptors of one request, as /v1/check's 64. Envoy
	// sends one per rate_limits action of a route that applies, a handful in practice.
	DefaultMaxDescriptors = 64
	// DefaultMaxEntries bounds the entries of one descriptor (the actions of one rate_limits).
	DefaultMaxEntries = 64
	// MaxMessage bounds a request's encoded size: the gRPC message (larger ones get
	// RESOURCE_EXHAUSTED before they are decoded) and the /json body.
	MaxMessage = 256 << 10
)

// checkBounds returns an error naming the field when req exceeds the bounds of s.
func (s *Server) checkBounds(req *pb.RateLimitRequest) error {
	descs := req.GetDescriptors()
	wide, entries := -1, 0
	for i, d := range descs {
		if n := len(d.GetEntries()); n > s.cfg.MaxEntries {
			wide, entries = i, n
			break
		}
	}
	return boundsError(len(descs), wide, entries, s.cfg.MaxDescriptors, s.cfg.MaxEntries)
}

// boundsError is the error of a request of descriptors descriptors, the first of them wider
// than maxEntries being descriptor wide (of entries entries; -1 for none): the descriptors'
// count first, as a list past its bound is refused whatever its members are; nil within the
// bounds. Every front and decoder refuses with it, so a request past the bounds is refused with
// the same reason however far it was decoded.
func boundsError(descriptors, wide, entries, maxDescriptors, maxEntries int) error {
	switch {
	case descriptors > maxDescriptors:
		return fmt.Errorf("descriptors: %d, more than the %d allowed", descriptors, maxDescriptors)
	case wide >= 0:
		return fmt.Errorf("descriptors[%d].entries: %d, more than the %d allowed", wide, entries, maxEntries)
	}
	return nil
}

// wireBounds returns boundsError of the RateLimitRequest encoded in b, counted from its wire
// bytes without decoding or allocating anything: every field 2 of the request is a descriptor
// and every field 1 of a descriptor an entry, as proto.Unmarshal appends them. It counts up to
// the end of b or its first malformed field (what follows cannot be decoded, so it is not
// counted), and is nil for a message within the bounds, malformed or not. A message shorter
// than the smallest past a bound (one more empty descriptor or entry than allowed, two bytes
// each) is not read.
func wireBounds(b []byte, maxDescriptors, maxEntries int) error {
	if len(b) < 2*(min(maxDescriptors, maxEntries)+1) {
		return nil
	}
	descriptors, wide, entries := 0, -1, 0
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeField(b)
		if n < 0 {
			break
		}
		if num == fieldRequestDescriptors && typ == protowire.BytesType {
			_, _, m := protowire.ConsumeTag(b)
			v, _ := protowire.ConsumeBytes(b[m:])
			e, ok := wireEntries(v, maxEntries)
			if wide < 0 && e > maxEntries {
				wide, entries = descriptors, e
			}
			descriptors++
			if !ok {
				break
			}
		}
		b = b[n:]
	}
	return boundsError(descriptors, wide, entries, maxDescriptors, maxEntries)
}

// wireEntries counts the entries (fields 1) of the descriptor b up to its end or first
// malformed field, and reports whether it reached the end.
func wireEntries(b []byte, maxEntries int) (entries int, ok bool) {
	if len(b) < 2*(maxEntries+1) {
		return 0, true // too short to be past the bound: proto.Unmarshal judges the rest
	}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeField(b)
		if n < 0 {
			return entries, false
		}
		if num == fieldDescriptorEntries && typ == protowire.BytesType {
			entries++
		}
		b = b[n:]
	}
	return entries, true
}
