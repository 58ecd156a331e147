package rls

import (
	"fmt"

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
	if len(descs) > s.cfg.MaxDescriptors {
		return fmt.Errorf("descriptors: %d, more than the %d allowed", len(descs), s.cfg.MaxDescriptors)
	}
	for i, d := range descs {
		if n := len(d.GetEntries()); n > s.cfg.MaxEntries {
			return fmt.Errorf("descriptors[%d].entries: %d, more than the %d allowed", i, n, s.cfg.MaxEntries)
		}
	}
	return nil
}
