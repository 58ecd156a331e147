package rls

import (
	"runtime"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"
)

// GRPCOptions configures NewGRPCServer.
type GRPCOptions struct {
	// Reflection registers the gRPC reflection service (off by default: it lists the service's
	// API to anyone who can connect).
	Reflection bool
	// MaxConcurrentStreams bounds the streams per connection (default: gRPC's).
	MaxConcurrentStreams uint32
	// MaxConnectionAge closes a connection (GOAWAY, then MaxConnectionAgeGrace for the calls in
	// flight) after this long, give or take 10%, so that the long-lived HTTP/2 connections of
	// Envoy spread over replicas added later (default 30 minutes; grace 1 minute).
	MaxConnectionAge, MaxConnectionAgeGrace time.Duration
}

// NewGRPCServer returns a gRPC server that serves s as envoy.service.ratelimit.v3.
// RateLimitService and answers the standard health checking protocol (grpc.health.v1,
// SERVING for the empty service and for the rate limit service).
func NewGRPCServer(s *Server, o GRPCOptions) *grpc.Server {
	g := grpc.NewServer(serverOptions(o)...)
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

// serverOptions are the grpc.Server settings of NewGRPCServer. Streams are served by a fixed
// pool of goroutines (one per CPU) instead of a new goroutine per call, and connections share
// their write buffers: both cut the work per call at high rates.
func serverOptions(o GRPCOptions) []grpc.ServerOption {
	if o.MaxConnectionAge <= 0 {
		o.MaxConnectionAge = 30 * time.Minute
	}
	if o.MaxConnectionAgeGrace <= 0 {
		o.MaxConnectionAgeGrace = time.Minute
	}
	opts := []grpc.ServerOption{
		grpc.NumStreamWorkers(uint32(runtime.GOMAXPROCS(0))),
		// A larger message is refused (RESOURCE_EXHAUSTED) from its length prefix, undecoded.
		grpc.MaxRecvMsgSize(MaxMessage),
		grpc.SharedWriteBuffer(true),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionAge: o.MaxConnectionAge, MaxConnectionAgeGrace: o.MaxConnectionAgeGrace}),
		// Envoy may ping an idle connection (connection_keepalive): allow it every 10s, or the
		// server would answer GOAWAY "too_many_pings".
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
	}
	if o.MaxConcurrentStreams > 0 {
		opts = append(opts, grpc.MaxConcurrentStreams(o.MaxConcurrentStreams))
	}
	return opts
}
