package main

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	rlext "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// openPreface opens n connections to addr that send the HTTP/2 preface and empty settings,
// then stay open, silent.
func openPreface(t *testing.T, addr string, n int) []net.Conn {
	return dialFlood(t, addr, n, func(c net.Conn) {
		_, _ = c.Write([]byte(http2.ClientPreface))
		_ = http2.NewFramer(c, c).WriteSettings()
	})
}

// stillOpenDraining counts the connections the server has not closed, reading what it sent
// (settings, pings) until each goes quiet or ends.
func stillOpenDraining(conns []net.Conn) int {
	n := 0
	for _, c := range conns {
		var b [4096]byte
		for {
			_ = c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
			_, err := c.Read(b[:])
			if errors.Is(err, os.ErrDeadlineExceeded) {
				n++
			}
			if err != nil {
				break
			}
		}
	}
	return n
}

// -max-conns used to cap the HTTP listener only: 500 idle connections with the HTTP/2 preface on
// the gRPC port, past ulimit -n, stopped /v1/check and ShouldRateLimit alike (accept4: too many
// open files; 0 of 20 each). Both listeners now draw from one budget, and a new connection on
// either port closes the quietest held one: the idle floods of both ports together hold at
// most -max-conns descriptors, and every call from a fresh connection is answered.
func TestIdleConnectionsOnEitherPortNeverStopChecksOrShouldRateLimit(t *testing.T) {
	const maxConns = 32
	grpcAddr := freeAddr(t)
	addr := startService(t, "-max-conns", "32", "-grpc-listen", grpcAddr, "-ratelimit-config", "../../service/rlsconfig/testdata/good")
	preface := openPreface(t, grpcAddr, 300)
	idle := openIdle(t, addr, 100)
	time.Sleep(150 * time.Millisecond) // past the quiet time a new connection is given

	httpOK, grpcOK := 0, 0
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}
	r := &pb.RateLimitRequest{Domain: "mongo_cps", Descriptors: []*rlext.RateLimitDescriptor{
		{Entries: []*rlext.RateLimitDescriptor_Entry{{Key: "database", Value: "users"}}}}}
	const calls = 20
	for range calls {
		resp, err := client.Post("http://"+addr+"/v1/check", "application/json",
			strings.NewReader(`{"descriptors":[{"key":"k","algorithm":"token_bucket","quota":1000,"window_ms":1000}]}`))
		if err == nil {
			if resp.StatusCode == http.StatusOK {
				httpOK++
			}
			resp.Body.Close()
		}
		conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if _, err := pb.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, r); err == nil {
			grpcOK++
		}
		cancel()
		conn.Close()
	}
	held := stillOpenDraining(preface) + stillOpen(idle)
	t.Logf("300 preface-only gRPC and 100 idle HTTP connections: the service holds %d (budget %d); %d/%d checks and %d/%d ShouldRateLimit from fresh connections answered",
		held, maxConns, httpOK, calls, grpcOK, calls)
	assert.LessOrEqual(t, held, maxConns)
	assert.Equal(t, calls, httpOK, "/v1/check")
	assert.Equal(t, calls, grpcOK, "ShouldRateLimit")
}
