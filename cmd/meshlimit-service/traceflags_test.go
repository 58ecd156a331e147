package main

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	rlext "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/meshlimit/meshlimit/internal/otlptest"
	"github.com/meshlimit/meshlimit/service/tracing"
)

const (
	testTraceID  = "4bf92f3577b34da6a3ce929d0e0e4736"
	testParentID = "00f067aa0ba902b7"
)

// runTraced runs the binary with args and env until stop is called, which waits for it to
// return (its shutdown flushes the spans).
func runTraced(t *testing.T, args []string, env map[string]string) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, append([]string{"-log-level", "error"}, args...), func(k string) string { return env[k] })
	}()
	return func() {
		cancel()
		select {
		case err := <-done:
			assert.NoError(t, err)
		case <-time.After(30 * time.Second):
			t.Fatal("run did not return")
		}
	}
}

func postWith(t *testing.T, url, body string, header ...string) int {
	t.Helper()
	var code int
	require.Eventually(t, func() bool {
		r, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
		require.NoError(t, err)
		for i := 0; i < len(header); i += 2 {
			r.Header.Set(header[i], header[i+1])
		}
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			return false
		}
		resp.Body.Close()
		code = resp.StatusCode
		return true
	}, 10*time.Second, 10*time.Millisecond)
	return code
}

func TestTheBinaryExportsASpanPerDecisionOnEveryFront(t *testing.T) {
	recv := otlptest.StartGRPC(t)
	httpAddr, grpcAddr := freeAddr(t), freeAddr(t)
	stop := runTraced(t, []string{"-listen", httpAddr, "-grpc-listen", grpcAddr, "-ratelimit-config", "../../service/rlsconfig/testdata/good",
		"-otlp-endpoint", recv.Endpoint, "-trace-resource-attributes", "deployment.environment=test"}, nil)

	assert.Equal(t, 200, postWith(t, "http://"+httpAddr+"/v1/check", `{"descriptors":[{"key":"meshlimit/per-user/1f/alice","algorithm":"fixed_window","quota":1,"window_ms":1000}]}`,
		"traceparent", "00-"+testTraceID+"-"+testParentID+"-01"))
	assert.Equal(t, 200, postWith(t, "http://"+httpAddr+"/json", `{"domain":"mongo_cps","descriptors":[{"entries":[{"key":"database","value":"users"}]}]}`,
		"b3", testTraceID+"-"+testParentID+"-1"))
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-b3-traceid", testTraceID, "x-b3-spanid", testParentID, "x-b3-sampled", "1")
	_, err = pb.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "edge_proxy_per_ip",
		Descriptors: []*rlext.RateLimitDescriptor{{Entries: []*rlext.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "50.0.0.5"}}}}})
	require.NoError(t, err)
	stop()

	spans := recv.WaitSpans(t, 3)
	byFront := map[any]otlptest.Span{}
	for _, s := range spans {
		byFront[s.Attributes[tracing.AttrFront]] = s
		assert.Equal(t, testTraceID, s.TraceID, s.Name)
		assert.Equal(t, testParentID, s.ParentSpanID, s.Name)
		assert.Equal(t, "meshlimit-service", s.Resource["service.name"])
		assert.Equal(t, "test", s.Resource["deployment.environment"])
	}
	assert.Equal(t, "meshlimit/per-user", byFront["http"].Attributes[tracing.AttrRule])
	assert.Equal(t, "allowed", byFront["http"].Attributes[tracing.AttrOutcome])
	assert.Equal(t, "mongo_cps", byFront["json"].Attributes[tracing.AttrDomain])
	assert.Equal(t, "edge_proxy_per_ip", byFront["grpc"].Attributes[tracing.AttrDomain])
	assert.Equal(t, "denied", byFront["grpc"].Attributes[tracing.AttrOutcome])
}

func TestTheOTELEnvironmentTurnsTracingOnOverHTTP(t *testing.T) {
	recv := otlptest.StartHTTP(t)
	addr := freeAddr(t)
	stop := runTraced(t, []string{"-listen", addr}, map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT": recv.Endpoint, "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf", "OTEL_SERVICE_NAME": "edge-limiter"})
	assert.Equal(t, 200, postWith(t, "http://"+addr+"/v1/check", `{"descriptors":[{"key":"k","algorithm":"fixed_window","quota":1,"window_ms":1000}]}`))
	stop()
	s := recv.WaitSpans(t, 1)[0]
	assert.Equal(t, "POST /v1/check", s.Name)
	assert.Equal(t, "edge-limiter", s.Resource["service.name"])
}

func TestTracingIsOffByDefault(t *testing.T) {
	o, err := parseOptions(nil, func(string) string { return "" })
	require.NoError(t, err)
	assert.False(t, o.trace.Enabled())
	o, err = parseOptions([]string{"-otlp-endpoint", "http://c:4317"}, func(k string) string { return map[string]string{"OTEL_SDK_DISABLED": "true"}[k] })
	require.NoError(t, err)
	assert.False(t, o.trace.Enabled(), "OTEL_SDK_DISABLED=true wins")
}

func TestABadTracingSettingIsAnErrorNamingItsFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"-otlp-endpoint", "collector:4317"}, nil, "-otlp-endpoint"},
		{[]string{"-otlp-endpoint", "http://c:4317", "-otlp-protocol", "udp"}, nil, "-otlp-protocol"},
		{nil, map[string]string{"MESHLIMIT_OTLP_ENDPOINT": "http://c:4317", "OTEL_TRACES_SAMPLER": "often"}, "-trace-sampler"},
		{[]string{"-otlp-endpoint", "http://c:4317", "-trace-sampler", "traceidratio", "-trace-sampler-arg", "2"}, nil, "-trace-sampler-arg"},
	} {
		_, err := parseOptions(tc.args, func(k string) string { return tc.env[k] })
		require.Error(t, err, "%q %v", tc.args, tc.env)
		assert.Contains(t, err.Error(), tc.want)
	}
}

// The SDK ignores a bad value of the variables it reads itself; the binary refuses it at start,
// naming the variable.
func TestABadOTELVariableStopsTheBinaryWithAnErrorNamingTheVariable(t *testing.T) {
	for variable, value := range map[string]string{
		"OTEL_EXPORTER_OTLP_TIMEOUT": "abc", "OTEL_EXPORTER_OTLP_HEADERS": "garbage", "OTEL_EXPORTER_OTLP_CERTIFICATE": "/nonexistent",
		"OTEL_EXPORTER_OTLP_COMPRESSION": "zstd", "OTEL_EXPORTER_OTLP_INSECURE": "maybe", "OTEL_BSP_MAX_QUEUE_SIZE": "abc",
		"OTEL_SDK_DISABLED": "yes", "OTEL_TRACES_SAMPLER": "often",
	} {
		env := map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317", variable: value}
		_, err := parseOptions(nil, func(k string) string { return env[k] })
		require.Error(t, err, variable)
		assert.Contains(t, err.Error(), variable)
	}
}
