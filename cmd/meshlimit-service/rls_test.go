package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlext "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().String()
}

// The binary serves Envoy's RateLimitService on -grpc-listen and /json on -listen from the
// files of -ratelimit-config, with the response headers asked for, and shuts both down.
func TestRunServesTheRateLimitServiceFront(t *testing.T) {
	httpAddr, grpcAddr := freeAddr(t), freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"-listen", httpAddr, "-grpc-listen", grpcAddr, "-log-level", "error", "-shutdown-drain", "0",
			"-ratelimit-config", "../../service/rlsconfig/testdata/good", "-ratelimit-response-headers", "draft03"},
			func(string) string { return "" })
	}()
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	c := pb.NewRateLimitServiceClient(conn)
	r := &pb.RateLimitRequest{Domain: "edge_proxy_per_ip", Descriptors: []*rlext.RateLimitDescriptor{
		{Entries: []*rlext.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "50.0.0.5"}}}}}
	var resp *pb.RateLimitResponse
	require.Eventually(t, func() bool {
		resp, err = c.ShouldRateLimit(ctx, r)
		return err == nil
	}, 5*time.Second, 10*time.Millisecond)
	assert.Equal(t, pb.RateLimitResponse_OVER_LIMIT, resp.GetOverallCode())
	require.Len(t, resp.GetResponseHeadersToAdd(), 3)
	assert.Equal(t, "RateLimit-Limit", resp.GetResponseHeadersToAdd()[0].GetKey())

	hresp, err := http.Post("http://"+httpAddr+"/json", "application/json", strings.NewReader(
		`{"domain":"mongo_cps","descriptors":[{"entries":[{"key":"database","value":"users"}]}]}`))
	require.NoError(t, err)
	body, _ := io.ReadAll(hresp.Body)
	hresp.Body.Close()
	assert.Equal(t, http.StatusOK, hresp.StatusCode, string(body))

	cancel()
	select {
	case err := <-done:
		assert.NoError(t, err)
	case <-time.After(15 * time.Second):
		t.Fatal("run did not return")
	}
}

// -ratelimit-response-dynamic-metadata, here from its environment variable, makes the answers
// carry the dynamic metadata with the rules' metadata.
func TestRunReturnsTheDynamicMetadataWhenAsked(t *testing.T) {
	httpAddr := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	env := map[string]string{"MESHLIMIT_RATELIMIT_RESPONSE_DYNAMIC_METADATA": "true"}
	go func() {
		done <- run(ctx, []string{"-listen", httpAddr, "-log-level", "error", "-shutdown-drain", "0", "-ratelimit-config", "../../service/rlsconfig/testdata/good"},
			func(k string) string { return env[k] })
	}()
	var body string
	require.Eventually(t, func() bool {
		resp, err := http.Post("http://"+httpAddr+"/json", "application/json",
			strings.NewReader(`{"domain":"units","descriptors":[{"entries":[{"key":"meta","value":"x"}]}]}`))
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		body = strings.ReplaceAll(string(b), " ", "")
		return resp.StatusCode == http.StatusOK
	}, 5*time.Second, 10*time.Millisecond)
	assert.Contains(t, body, `"dynamicMetadata":{"descriptors":[{"entries":["meta=x"]}],"domain":"units","metadata":{"tags":["a","b"],"team":"payments"}}`)
	cancel()
	require.NoError(t, <-done)
}

func TestRunRefusesABadRateLimitSetup(t *testing.T) {
	bad := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(bad, "a.yaml"), []byte("domain: a\nnope: 1\n"), 0o644))
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"-grpc-listen without -ratelimit-config is refused", []string{"-grpc-listen", "127.0.0.1:0"}, "-grpc-listen: needs -ratelimit-config"},
		{"a bad file in -ratelimit-config is refused naming it", []string{"-ratelimit-config", bad}, "a.yaml:2:1: nope: unknown field"},
		{"a missing -ratelimit-config directory is refused", []string{"-ratelimit-config", filepath.Join(bad, "missing")}, "-ratelimit-config:"},
		{"an unknown header mode is refused", []string{"-ratelimit-config", "../../service/rlsconfig/testdata/good", "-ratelimit-response-headers", "x"}, "-ratelimit-response-headers:"},
		{"a bad poll interval is refused", []string{"-ratelimit-poll", "0s"}, "-ratelimit-poll:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"-listen", "127.0.0.1:0", "-log-level", "error"}, tc.args...)
			err := run(context.Background(), args, func(string) string { return "" })
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// The running binary reloads a changed file, and keeps the last good rules while a file is bad.
func TestRunReloadsTheRateLimitConfigAndKeepsTheLastGoodOne(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "edge.yaml")
	rules := func(rpu int) string {
		return fmt.Sprintf("domain: edge\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: %d}\n", rpu)
	}
	require.NoError(t, os.WriteFile(file, []byte(rules(100)), 0o644))
	httpAddr := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"-listen", httpAddr, "-log-level", "error", "-shutdown-drain", "0", "-ratelimit-config", dir, "-ratelimit-poll", "20ms"},
			func(string) string { return "" })
	}()
	// limit returns the current_limit the service answers for descriptor k=v (0 when none).
	limit := func() int {
		resp, err := http.Post("http://"+httpAddr+"/json", "application/json",
			strings.NewReader(`{"domain":"edge","descriptors":[{"entries":[{"key":"k","value":"v"}],"hitsAddend":"0"}]}`))
		if err != nil {
			return -1
		}
		defer resp.Body.Close()
		var out struct {
			Statuses []struct {
				CurrentLimit struct {
					RequestsPerUnit int `json:"requestsPerUnit"`
				} `json:"currentLimit"`
			} `json:"statuses"`
		}
		if json.NewDecoder(resp.Body).Decode(&out) != nil || len(out.Statuses) != 1 {
			return -1
		}
		return out.Statuses[0].CurrentLimit.RequestsPerUnit
	}
	require.Eventually(t, func() bool { return limit() == 100 }, 5*time.Second, 10*time.Millisecond)

	later := time.Now().Add(time.Minute) // a different mtime, whatever the file system's resolution
	require.NoError(t, os.WriteFile(file, []byte(rules(7)), 0o644))
	require.NoError(t, os.Chtimes(file, later, later))
	require.Eventually(t, func() bool { return limit() == 7 }, 5*time.Second, 10*time.Millisecond, "the changed file is in force")

	require.NoError(t, os.WriteFile(file, []byte(rules(9)+"    unknown: 1\n"), 0o644))
	require.NoError(t, os.Chtimes(file, later.Add(time.Minute), later.Add(time.Minute)))
	time.Sleep(200 * time.Millisecond) // ten polls
	assert.Equal(t, 7, limit(), "a bad file keeps the last good rules")

	cancel()
	require.NoError(t, <-done)
}
