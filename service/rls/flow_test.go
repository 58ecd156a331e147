package rls

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/peer"

	"github.com/meshlimit/meshlimit/service"
	"github.com/meshlimit/meshlimit/service/rlsconfig"
)

// flowRecorder is a Store that records the flow key of each window count's connection.
type flowRecorder struct {
	service.Store
	mu   sync.Mutex
	keys []any
}

func (f *flowRecorder) CountWindow(ctx context.Context, r service.CountRequest) (int64, time.Duration, error) {
	if p, ok := peer.FromContext(ctx); ok {
		f.mu.Lock()
		f.keys = append(f.keys, flowKey(p.Addr))
		f.mu.Unlock()
	}
	return f.Store.CountWindow(ctx, r)
}

func TestTheCallsOfOneGRPCConnectionShareOneFlowAndTwoConnectionsDoNot(t *testing.T) {
	rules := goodRules(t)
	rec := &flowRecorder{Store: memoryStore(t)}
	s, err := NewServer(Config{Store: rec, Rules: func() *rlsconfig.Config { return rules }, Now: func() time.Time { return minuteStart }})
	require.NoError(t, err)
	g := NewGRPCServer(s, GRPCOptions{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = g.Serve(ln) }()
	t.Cleanup(g.Stop)
	call := func(c pb.RateLimitServiceClient) {
		_, err := c.ShouldRateLimit(context.Background(), req("edge_proxy_per_ip", desc("remote_address", "10.0.0.1")))
		require.NoError(t, err)
	}
	for range 2 {
		conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		require.NoError(t, err)
		c := pb.NewRateLimitServiceClient(conn)
		call(c)
		call(c)
		require.NoError(t, conn.Close())
	}
	require.Len(t, rec.keys, 4)
	assert.True(t, rec.keys[0] == rec.keys[1], "one connection, one flow") // as the Gate's map compares them
	assert.True(t, rec.keys[2] == rec.keys[3], "one connection, one flow")
	assert.False(t, rec.keys[0] == rec.keys[2], "two connections, two flows")
}

func TestAFlowKeyIsTheAddressOrElseItsString(t *testing.T) {
	tcp := &net.TCPAddr{IP: net.IPv4(10, 0, 0, 1), Port: 5}
	cases := []struct {
		name string
		addr net.Addr
		want any
	}{
		{"a TCP address is its own key", tcp, tcp},
		{"a Unix address is its string", &net.UnixAddr{Name: "/run/s", Net: "unix"}, "/run/s"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { assert.Equal(t, c.want, flowKey(c.addr)) })
	}
	assert.False(t, flowKey(&net.TCPAddr{IP: net.IPv4(10, 0, 0, 1), Port: 5}) == flowKey(tcp), "another connection of the same address string")
}
