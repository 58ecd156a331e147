package rls

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/meshlimit/meshlimit/service"
)

// pingStore is a store whose Ping answers err, as the Redis store's does for a full Redis
// (service.ErrStoreFull, joined with the reason) or a dead one.
type pingStore struct {
	service.Store
	err error
}

func (p pingStore) Ping(context.Context) error { return p.err }

// Review r21 F5: with a full Redis, gRPC health said NOT_SERVING while /readyz said 200, so
// an Envoy health-checking over gRPC ejected every replica at once. Both now answer from
// service.StoreReady: ready for a healthy or only-full store, not for a dead one.
func TestGRPCHealthAndReadyzAgreeOnAFullAHealthyAndADeadStore(t *testing.T) {
	for _, tc := range []struct {
		name  string
		err   error
		ready bool
	}{
		{"a healthy store is ready on both", nil, true},
		{"a full store is ready on both", fmt.Errorf("redis: %w", errors.Join(service.ErrStoreFull, errors.New("OOM"))), true},
		{"a dead store is ready on neither", errors.New("connection refused"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := pingStore{memoryStore(t), tc.err}
			resp, err := NewHealth(store, time.Second).Check(context.Background(), &healthpb.HealthCheckRequest{})
			require.NoError(t, err)
			h, err := service.NewHandler(service.Config{Store: store, Timeout: time.Second})
			require.NoError(t, err)
			w := httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/readyz", nil))
			assert.Equal(t, tc.ready, resp.GetStatus() == healthpb.HealthCheckResponse_SERVING, "gRPC health: %v", resp.GetStatus())
			assert.Equal(t, tc.ready, w.Code == http.StatusOK, "/readyz: %d %s", w.Code, w.Body.String())
		})
	}
}
