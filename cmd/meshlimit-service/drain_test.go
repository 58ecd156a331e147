package main

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/meshlimit/meshlimit/internal/redistest"
)

// grpcHealth returns the grpc.health.v1 status of the service named svc at the gRPC front
// conn, or an error.
func grpcHealth(conn *grpc.ClientConn, svc string) (healthpb.HealthCheckResponse_ServingStatus, error) {
	resp, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{Service: svc})
	return resp.GetStatus(), err
}

// readyz is the status code and body of the service's /readyz.
func readyz(t *testing.T, addr string) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/readyz")
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// startFront runs the service with the RLS front on free addresses with extra args and hooks
// until the returned cancel, and returns its HTTP address, a gRPC connection to it, and the
// channel run's error comes on.
func startFront(t *testing.T, hk hooks, extra ...string) (string, *grpc.ClientConn, context.CancelFunc, chan error) {
	t.Helper()
	httpAddr, grpcAddr := freeAddr(t), freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	args := append([]string{"-listen", httpAddr, "-grpc-listen", grpcAddr, "-log-level", "error", "-shutdown-drain", "0",
		"-ratelimit-config", "../../service/rlsconfig/testdata/good"}, extra...)
	go func() { done <- runWith(ctx, args, func(string) string { return "" }, hk) }()
	t.Cleanup(cancel)
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	require.Eventually(t, func() bool {
		st, err := grpcHealth(conn, "")
		return err == nil && st == healthpb.HealthCheckResponse_SERVING
	}, 10*time.Second, 10*time.Millisecond, "the gRPC front serves")
	return httpAddr, conn, cancel, done
}

// On SIGTERM the service drains for -shutdown-drain: /readyz and both gRPC health services
// report not serving while checks and ShouldRateLimit are still answered; then it shuts down.
func TestOnShutdownTheServiceReportsNotServingWhileStillAnsweringForTheDrain(t *testing.T) {
	started, release := make(chan time.Duration, 1), make(chan struct{})
	hk := hooks{drainWait: func(d time.Duration) { started <- d; <-release }}
	httpAddr, conn, cancel, done := startFront(t, hk, "-shutdown-drain", "7s")
	code, _ := readyz(t, httpAddr)
	require.Equal(t, http.StatusOK, code)

	cancel() // as SIGTERM does
	assert.Equal(t, 7*time.Second, <-started)
	code, body := readyz(t, httpAddr)
	assert.Equal(t, http.StatusServiceUnavailable, code)
	assert.Contains(t, body, "draining")
	for _, svc := range []string{"", "envoy.service.ratelimit.v3.RateLimitService"} {
		st, err := grpcHealth(conn, svc)
		require.NoError(t, err)
		assert.Equal(t, healthpb.HealthCheckResponse_NOT_SERVING, st, "service %q", svc)
	}
	resp, err := http.Post("http://"+httpAddr+"/v1/check", "application/json", strings.NewReader(checkBody("drain", 5)))
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode, "checks are still answered")
	_, err = pb.NewRateLimitServiceClient(conn).ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "mongo_cps"})
	assert.Error(t, err, "a request without descriptors is refused, by the server that still answers")
	assert.NotContains(t, err.Error(), "connection refused")

	close(release)
	select {
	case err := <-done:
		assert.NoError(t, err)
	case <-time.After(15 * time.Second):
		t.Fatal("run did not return after the drain")
	}
}

// gRPC health reports NOT_SERVING while Redis is down, as /readyz fails, and SERVING again once
// it is back.
func TestGRPCHealthReportsNotServingWhileRedisIsDown(t *testing.T) {
	srv := redistest.Start(t)
	httpAddr, conn, _, _ := startFront(t, hooks{}, "-redis", srv.Addr())
	srv.Stop()
	for _, svc := range []string{"", "envoy.service.ratelimit.v3.RateLimitService"} {
		st, err := grpcHealth(conn, svc)
		require.NoError(t, err)
		assert.Equal(t, healthpb.HealthCheckResponse_NOT_SERVING, st, "service %q", svc)
	}
	code, _ := readyz(t, httpAddr)
	assert.Equal(t, http.StatusServiceUnavailable, code, "as /readyz")

	srv.Start()
	assert.Eventually(t, func() bool {
		st, err := grpcHealth(conn, "")
		return err == nil && st == healthpb.HealthCheckResponse_SERVING
	}, 30*time.Second, 20*time.Millisecond, "SERVING once Redis is back")
}
