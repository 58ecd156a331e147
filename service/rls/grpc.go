package rls

import (
	"context"
	"runtime"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/tap"

	"github.com/meshlimit/meshlimit/service"
)

// GRPCOptions configures NewGRPCServer. Every bound has a default that a replica of 256 Mi
// survives any client with: at most MaxConcurrentStreams streams of at most MaxHeaderListSize
// header bytes and MaxMessage message bytes per connection.
type GRPCOptions struct {
	// Reflection registers the gRPC reflection service (off by default: it lists the service's
	// API to anyone who can connect).
	Reflection bool
	// MaxConcurrentStreams bounds the streams per connection (default DefaultMaxStreams); a
	// stream past it is refused (RST_STREAM REFUSED_STREAM, which Envoy retries elsewhere).
	MaxConcurrentStreams uint32
	// MaxHeaderListSize bounds the decoded header bytes of a stream (default
	// DefaultMaxHeaderListSize): a larger header block is refused as it is decoded, so that a
	// few bytes of HPACK references cannot make megabytes of headers.
	MaxHeaderListSize uint32
	// MaxConnectionIdle closes a connection without a stream for this long (default 5 minutes),
	// and HandshakeTimeout one that has not sent the HTTP/2 preface and settings in time
	// (default 2 s, as the HTTP listener's header timeout).
	MaxConnectionIdle, HandshakeTimeout time.Duration
	// StreamTimeout bounds a stream from its headers to its answer (default 5 s): a stream
	// that never sends its message is ended (DEADLINE_EXCEEDED) and frees its slot, instead of
	// being held until the connection closes. The store work of a call is bounded by the
	// Server's Timeout, far below it.
	StreamTimeout time.Duration
	// MaxConnectionAge closes a connection (GOAWAY, then MaxConnectionAgeGrace for the calls in
	// flight) after this long, give or take 10%, so that the long-lived HTTP/2 connections of
	// Envoy spread over replicas added later (default 30 minutes; grace 1 minute).
	MaxConnectionAge, MaxConnectionAgeGrace time.Duration
	// Health answers grpc.health.v1 (nil: NewHealth of the Server's store and timeout); its
	// Drain makes the server NOT_SERVING on shutdown.
	Health *Health
	// Conns, when the server serves a listener of this budget (ConnBudget.LimitQuiet), is
	// told each RPC's start and end, so that the budget judges a connection by its RPCs.
	Conns *service.ConnBudget
}

// The defaults of GRPCOptions.
const (
	DefaultMaxStreams        = 128
	DefaultMaxHeaderListSize = 16 << 10
)

// NewGRPCServer returns a gRPC server that serves s as envoy.service.ratelimit.v3.
// RateLimitService and answers the standard health checking protocol (grpc.health.v1) with
// o.Health, or a Health of s's store (health.go).
func NewGRPCServer(s *Server, o GRPCOptions) *grpc.Server {
	g := grpc.NewServer(serverOptions(o)...)
	g.RegisterService(&rateLimitService, s)
	if o.Health == nil {
		o.Health = NewHealth(s.cfg.Store, s.cfg.Timeout)
	}
	healthpb.RegisterHealthServer(g, o.Health)
	if o.Reflection {
		reflection.Register(g)
	}
	return g
}

// rateLimitService is pb's RateLimitService with its ShouldRateLimit decoded into an inRequest
// (shouldRateLimitHandler).
var rateLimitService = func() grpc.ServiceDesc {
	d := pb.RateLimitService_ServiceDesc
	d.Methods = []grpc.MethodDesc{{MethodName: "ShouldRateLimit", Handler: shouldRateLimitHandler}}
	return d
}()

// shouldRateLimitHandler is pb's ShouldRateLimit handler, but the message is decoded by
// requestCodec into an inRequest bounded by the Server's bounds: a message past them is refused
// before its descriptors are allocated, and a malformed one, like one past them, is answered
// INVALID_ARGUMENT (gRPC answers a codec's error INTERNAL), counted and traced as any refused
// request.
func shouldRateLimitHandler(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
	s := srv.(*Server)
	in := &inRequest{maxDescriptors: s.cfg.MaxDescriptors, maxEntries: s.cfg.MaxEntries}
	if err := dec(in); err != nil {
		return nil, err
	}
	if interceptor == nil {
		return s.shouldRateLimit(ctx, &in.req, in.err)
	}
	info := &grpc.UnaryServerInfo{Server: srv, FullMethod: pb.RateLimitService_ShouldRateLimit_FullMethodName}
	return interceptor(ctx, &in.req, info, func(ctx context.Context, _ any) (any, error) {
		return s.shouldRateLimit(ctx, &in.req, in.err)
	})
}

// serverOptions are the grpc.Server settings of NewGRPCServer. Streams are served by a fixed
// pool of goroutines (one per CPU) instead of a new goroutine per call, connections share
// their write buffers (grpc's default since v1.83), and requests are decoded by requestCodec:
// all cut the work per call at high rates.
func serverOptions(o GRPCOptions) []grpc.ServerOption {
	o = o.withDefaults()
	opts := []grpc.ServerOption{
		grpc.NumStreamWorkers(uint32(runtime.GOMAXPROCS(0))),
		// RateLimitRequests decoded with their descriptors allocated together (codec.go).
		grpc.ForceServerCodecV2(newRequestCodec()),
		// A larger message is refused (RESOURCE_EXHAUSTED) from its length prefix, undecoded.
		grpc.MaxRecvMsgSize(MaxMessage),
		grpc.MaxConcurrentStreams(o.MaxConcurrentStreams),
		grpc.MaxHeaderListSize(o.MaxHeaderListSize),
		grpc.ConnectionTimeout(o.HandshakeTimeout),
		grpc.InTapHandle(streamDeadline(o.StreamTimeout)),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: o.MaxConnectionIdle,
			MaxConnectionAge: o.MaxConnectionAge, MaxConnectionAgeGrace: o.MaxConnectionAgeGrace}),
		// Envoy may ping an idle connection (connection_keepalive): allow it every 10s, or the
		// server would answer GOAWAY "too_many_pings"; more often is a GOAWAY.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
	}
	if o.Conns != nil {
		opts = append(opts, grpc.StatsHandler(connWork{o.Conns}))
	}
	return opts
}

// withDefaults fills the options left zero.
func (o GRPCOptions) withDefaults() GRPCOptions {
	defaults := []struct {
		d   *time.Duration
		def time.Duration
	}{
		{&o.MaxConnectionIdle, 5 * time.Minute}, {&o.HandshakeTimeout, 2 * time.Second}, {&o.StreamTimeout, 5 * time.Second},
		{&o.MaxConnectionAge, 30 * time.Minute}, {&o.MaxConnectionAgeGrace, time.Minute},
	}
	for _, d := range defaults {
		if *d.d <= 0 {
			*d.d = d.def
		}
	}
	if o.MaxConcurrentStreams == 0 {
		o.MaxConcurrentStreams = DefaultMaxStreams
	}
	if o.MaxHeaderListSize == 0 {
		o.MaxHeaderListSize = DefaultMaxHeaderListSize
	}
	return o
}

// streamDeadline returns the tap that gives every stream a deadline of d from its headers. The
// transport waits for the stream's message under this context, so the wait ends with it; the
// deadline's timer is released when the stream ends.
func streamDeadline(d time.Duration) tap.ServerInHandle {
	return func(ctx context.Context, _ *tap.Info) (context.Context, error) {
		ctx, cancel := context.WithTimeout(ctx, d)
		context.AfterFunc(ctx, cancel)
		return ctx, nil
	}
}
