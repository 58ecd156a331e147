package rls

import (
	"context"
	"sync/atomic"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/meshlimit/meshlimit/service"
)

// Health answers the gRPC health checking protocol (grpc.health.v1) for the empty service and
// envoy.service.ratelimit.v3.RateLimitService as /readyz answers (service.StoreReady): SERVING
// while the store answers a ping or is only full, NOT_SERVING while it does not (an Envoy that health-checks the cluster over
// gRPC then sends to the other replicas, not to one that can only answer errors) and from
// Drain on. Check pings the store each time, bounded by the timeout; Watch and List report the
// status of the last Check, or of Drain.
type Health struct {
	*health.Server
	store    service.Store
	timeout  time.Duration
	draining atomic.Bool
}

// healthServices are the services Health reports on.
var healthServices = []string{"", pb.RateLimitService_ServiceDesc.ServiceName}

// NewHealth returns the Health of store, whose pings are bounded by timeout (the service's
// -timeout, as /readyz's: service.StoreReady).
func NewHealth(store service.Store, timeout time.Duration) *Health {
	h := &Health{Server: health.NewServer(), store: store, timeout: timeout}
	h.set(healthpb.HealthCheckResponse_SERVING)
	return h
}

// Check answers the status of req's service: NOT_FOUND (an error) for another service.
func (h *Health) Check(ctx context.Context, req *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	if _, err := h.Server.Check(ctx, req); err != nil {
		return nil, err
	}
	st := healthpb.HealthCheckResponse_SERVING
	if h.draining.Load() {
		st = healthpb.HealthCheckResponse_NOT_SERVING
	} else {
		if ready, _, _ := service.StoreReady(ctx, h.store, h.timeout); !ready {
			st = healthpb.HealthCheckResponse_NOT_SERVING
		}
	}
	h.set(st)
	if h.draining.Load() { // Drain came while the ping was out: its status stands
		h.set(healthpb.HealthCheckResponse_NOT_SERVING)
	}
	return &healthpb.HealthCheckResponse{Status: st}, nil
}

// Drain makes every service NOT_SERVING from now on.
func (h *Health) Drain() {
	h.draining.Store(true)
	h.set(healthpb.HealthCheckResponse_NOT_SERVING)
}

func (h *Health) set(st healthpb.HealthCheckResponse_ServingStatus) {
	for _, s := range healthServices {
		h.SetServingStatus(s, st)
	}
}
