package rls

import (
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
)

// GRPCOptions configures NewGRPCServer.
type GRPCOptions struct {
	// Reflection registers the gRPC reflection service (off by default: it lists the service's
	// API to anyone who can connect).
	Reflection bool
	// MaxConcurrentStreams bounds the streams per connection (default: gRPC's).
	MaxConcurrentStreams uint32
}

// NewGRPCServer returns a gRPC server that serves s as envoy.service.ratelimit.v3.
// RateLimitService and answers the standard health checking protocol (grpc.health.v1,
// SERVING for the empty service and for the rate limit service).
func NewGRPCServer(s *Server, o GRPCOptions) *grpc.Server {
	var opts []grpc.ServerOption
	if o.MaxConcurrentStreams > 0 {
		opts = append(opts, grpc.MaxConcurrentStreams(o.MaxConcurrentStreams))
	}
	g := grpc.NewServer(opts...)
	pb.RegisterRateLimitServiceServer(g, s)
	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus(pb.RateLimitService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(g, hs)
	if o.Reflection {
		reflection.Register(g)
	}
	return g
}
