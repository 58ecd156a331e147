package rls

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"sync"
	"sync/atomic"
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

// frame is one HTTP/2 frame on stream 0.
func frame(typ byte, payload []byte) []byte {
	b := make([]byte, 9, 9+len(payload))
	b[0], b[1], b[2] = byte(len(payload)>>16), byte(len(payload)>>8), byte(len(payload))
	b[3] = typ
	return append(b, payload...)
}

// controlFrames is what the review's attacker sent every 30 ms: a 13-byte WINDOW_UPDATE(0, 1), and
// a PING for good measure; control frames, no stream.
func controlFrames() []byte {
	inc := binary.BigEndian.AppendUint32(nil, 1)
	return append(frame(0x8, inc), frame(0x6, make([]byte, 8))...)
}

// attacker connects, sends the HTTP/2 preface, SETTINGS and a keepalive, and says whether the
// server kept the connection (it answered with a frame) or closed it at once (EOF).
func attacker(t *testing.T, addr string) (net.Conn, bool) {
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	_, err = c.Write(append(append([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), frame(0x4, nil)...), controlFrames()...))
	if err != nil {
		return c, false
	}
	_, err = io.ReadFull(c, make([]byte, 9))
	return c, err == nil
}

// Review r21 F1: connections that send a WINDOW_UPDATE every 30 ms were never "quiet", so
// the budget closed the honest proxy's connection instead and refused its reconnects. Now a
// connection is judged by its RPCs: the attackers, who complete none, are the ones closed,
// however many control frames they send, and the honest connection keeps being served. The
// clock is the budget's own (advanced by the test), the waits are on the server's answers.
func TestConnectionsSendingOnlyWindowUpdatesAndPingsNeverCloseAnHonestProxysConnection(t *testing.T) {
	const budget, attackers = 4, 12
	var clock atomic.Int64
	clock.Store(time.Unix(1_000_000, 0).UnixNano())
	b := service.NewConnBudget(budget)
	b.Now = func() time.Time { return time.Unix(0, clock.Load()) }
	var reclaims, provenReclaims atomic.Int64
	b.OnClose = func(why service.ConnClosure) {
		reclaims.Add(1)
		if why != service.ClosedUnproven {
			provenReclaims.Add(1)
		}
	}
	f := newFixture(t, memoryStore(t), HeadersOff)
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	g := NewGRPCServer(f.srv, GRPCOptions{Conns: b})
	go func() { _ = g.Serve(b.LimitQuiet(tcp)) }()
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient(tcp.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	honest := pb.NewRateLimitServiceClient(conn)
	call := func() error {
		_, err := honest.ShouldRateLimit(context.Background(), req("edge_proxy_per_ip", desc("remote_address", "10.0.0.1")))
		return err
	}
	require.NoError(t, call(), "the honest proxy's first call")

	var held []net.Conn
	for i := range attackers {
		clock.Add(int64(time.Second)) // every connection held is past its quiet time
		for _, c := range held {
			_, _ = c.Write(controlFrames())
		}
		c, kept := attacker(t, tcp.Addr().String())
		require.True(t, kept, "attacker %d gets a connection by closing an older attacker's", i)
		held = append(held, c)
		require.NoError(t, call(), "the honest proxy is served after attacker %d", i)
	}
	assert.Equal(t, int64(attackers-(budget-1)), reclaims.Load(), "one attacker closed per attacker past the budget")
	assert.Zero(t, provenReclaims.Load(), "the honest connection, which completed RPCs, was never closed, nor any connection refused")
}

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
