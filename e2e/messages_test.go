package e2e

import (
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/internal/envoyhost"
	"github.com/meshlimit/meshlimit/messages"
)

// Message limits (rules[].messages) on the compiled module: gRPC streams and WebSocket sessions
// held to their messages/s, or ended, across worker VMs, on the virtual clock.

func messageRule(block string) string {
	return `{"rules":[{"name":"chat","key":[{"header":"x-user"}],"limits":[{"rate":"10/s"}],"messages":` + block + `}]}`
}

func grpcStream(user string) *envoyhost.Request {
	h := envoyhost.Headers{{":method", "POST"}, {":path", "/chat.Chat/Talk"}, {":authority", "a.example"}, {":scheme", "http"},
		{"content-type", "application/grpc"}, {"te", "trailers"}, {"x-user", user}}
	return &envoyhost.Request{Headers: h, Info: envoyhost.StreamInfo{SourceAddress: "192.0.2.7:40000"}}
}

func grpcMessage(size int) []byte {
	b := binary.BigEndian.AppendUint32([]byte{0}, uint32(size))
	return append(b, make([]byte, size)...)
}

// grpcCount counts the gRPC messages in a body.
func grpcCount(t *testing.T, body []byte) int {
	var g messages.GRPC
	n, err := g.Feed(body)
	require.NoError(t, err)
	return n
}

// openGRPC opens a bidirectional gRPC stream on vm whose server answered headers.
func openGRPC(t *testing.T, vm *envoyhost.VM, user string) *envoyhost.Stream {
	req := grpcStream(user)
	s := vm.NewStream(req.Info)
	act, err := s.SendRequestHeaders(req.Headers, false)
	require.NoError(t, err)
	require.Equal(t, envoyhost.ActionContinue, act)
	_, err = s.SendResponseHeaders(envoyhost.Headers{{":status", "200"}, {"content-type", "application/grpc"}}, false)
	require.NoError(t, err)
	return s
}

// eager is a sender pushed back by flow control: it writes a message every step unless the
// filter holds its direction (what it wrote last is still in Envoy's buffer).
type eager struct {
	s   *envoyhost.Stream
	dir int // 0 request, 1 response
}

func (e eager) held() bool {
	req, resp := e.s.Flow()
	if e.dir == 0 {
		return req.Held > 0
	}
	return resp.Held > 0
}

func (e eager) step(t *testing.T, msg []byte) {
	if e.held() {
		return
	}
	var err error
	if e.dir == 0 {
		_, err = e.s.SendRequestBody(msg, false)
	} else {
		_, err = e.s.SendResponseBody(msg, false)
	}
	require.NoError(t, err)
}

func (e eager) passed(t *testing.T) int {
	if e.dir == 0 {
		return grpcCount(t, e.s.UpstreamBody())
	}
	return grpcCount(t, e.s.DownstreamBody())
}

// run steps the senders every 10 ms of virtual time for d.
func run(t *testing.T, p *envoyhost.Plugin, d time.Duration, msg []byte, senders ...eager) {
	for range d / (10 * time.Millisecond) {
		for _, e := range senders {
			e.step(t, msg)
		}
		p.Clock().Advance(10 * time.Millisecond)
	}
}

func TestABidirectionalGRPCStreamIsHeldToItsMessageRateInEachDirection(t *testing.T) {
	p := load(t, module(t, "meshlimit"), messageRule(`{"direction":"both"}`), 2)
	s := openGRPC(t, p.VM(1), "ann")
	up, down := eager{s, 0}, eager{s, 1}
	msg := grpcMessage(20)
	run(t, p, time.Second, msg, up, down) // the burst of 10 is spent
	up0, down0 := up.passed(t), down.passed(t)
	run(t, p, 10*time.Second, msg, up, down)
	upRate, downRate := float64(up.passed(t)-up0)/10, float64(down.passed(t)-down0)/10
	t.Logf("measured over 10 s of virtual time: %.1f messages/s up, %.1f down (limit 10/s each)", upRate, downRate)
	assert.InDelta(t, 10, upRate, 0.5, "client to server within 5%")
	assert.InDelta(t, 10, downRate, 0.5, "server to client within 5%")
	assert.False(t, s.Reset())
	require.NoError(t, s.Close())
	assert.Zero(t, counter(p, "meshlimit.messages.held"))
	assert.Zero(t, p.PollOneoffCalls())
}

func TestAKeysStreamsOnDifferentWorkersShareItsMessageLimitExactly(t *testing.T) {
	p := load(t, module(t, "meshlimit"), messageRule(`{"direction":"request"}`), 3)
	var senders []eager
	for i := range 6 {
		senders = append(senders, eager{openGRPC(t, p.VM(i%3), "ann"), 0})
	}
	other := eager{openGRPC(t, p.VM(0), "bob"), 0}
	run(t, p, 10*time.Second, grpcMessage(3), append(senders, other)...)
	total := 0
	for _, e := range senders {
		total += e.passed(t)
	}
	// A token bucket of 10 at 10/s admits at most 10 + 10·t messages by t; every stream offered
	// far more, so the key gets all of that, give or take the messages the last tick held.
	t.Logf("ann's 6 streams on 3 workers passed %d messages in 10 s; bob's one stream %d", total, other.passed(t))
	assert.LessOrEqual(t, total, 10+10*10, "never more than the bucket admits, across workers")
	assert.GreaterOrEqual(t, total, 10+10*10-len(senders), "the held streams get what the bucket frees")
	assert.InDelta(t, 110, other.passed(t), 1, "another key has its own bucket")
	for _, e := range append(senders, other) {
		require.NoError(t, e.s.Close())
	}
}

func TestAGRPCStreamOverItsMessageLimitInEndModeGetsResourceExhausted(t *testing.T) {
	p := load(t, module(t, "meshlimit"), messageRule(`{"on_limit":"end"}`), 2)
	req := grpcStream("ann")
	s := p.VM(0).NewStream(req.Info)
	_, err := s.SendRequestHeaders(req.Headers, false)
	require.NoError(t, err)
	var body []byte
	for range 11 {
		body = append(body, grpcMessage(1)...)
	}
	act, err := s.SendRequestBody(body, false)
	require.NoError(t, err)
	assert.Equal(t, envoyhost.ActionStop, act)
	r := s.LocalReply()
	require.NotNil(t, r)
	assert.Equal(t, int32(8), r.GRPCStatus, "RESOURCE_EXHAUSTED")
	assert.Equal(t, "message rate limit exceeded", string(r.Body))
	assert.Equal(t, envoyhost.Headers{{":status", "200"}, {"content-type", "application/grpc"}, {"grpc-status", "8"},
		{"grpc-message", "message rate limit exceeded"}}, s.DownstreamHeaders(), "trailers-only")
	assert.Equal(t, 0, grpcCount(t, s.UpstreamBody()), "the chunk with the 11th message does not reach the server")
	assert.Equal(t, int64(1), counter(p, "meshlimit.messages.ended"))
}

func wsUpgrade(user string) *envoyhost.Request {
	return get("a.example", "/ws", "192.0.2.7", [2]string{"upgrade", "websocket"}, [2]string{"connection", "Upgrade"},
		[2]string{"sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ=="}, [2]string{"sec-websocket-version", "13"}, [2]string{"x-user", user})
}

// wsText is a text frame; masked when the client sends it.
func wsText(payload string, fromClient bool) []byte {
	if !fromClient {
		return append([]byte{0x81, byte(len(payload))}, payload...)
	}
	b := []byte{0x81, 0x80 | byte(len(payload)), 9, 8, 7, 6}
	for i := range len(payload) {
		b = append(b, payload[i]^b[2+i%4])
	}
	return b
}

func openWS(t *testing.T, vm *envoyhost.VM, user string) *envoyhost.Stream {
	req := wsUpgrade(user)
	s := vm.NewStream(req.Info)
	_, err := s.SendRequestHeaders(req.Headers, false)
	require.NoError(t, err)
	_, err = s.SendResponseHeaders(envoyhost.Headers{{":status", "101"}, {"upgrade", "websocket"}, {"connection", "Upgrade"}}, false)
	require.NoError(t, err)
	return s
}

func TestAWebSocketSessionIsHeldToItsMessageRate(t *testing.T) {
	p := load(t, module(t, "meshlimit"), messageRule(`{"direction":"request","protocols":["websocket"]}`), 2)
	s := openWS(t, p.VM(1), "ann")
	count := func() int {
		w := messages.WebSocket{FromClient: true}
		n, err := w.Feed(s.UpstreamBody())
		require.NoError(t, err)
		return n
	}
	msg := wsText("hello", true)
	e := eager{s, 0}
	run(t, p, time.Second, msg, e)
	n0 := count()
	run(t, p, 10*time.Second, msg, e)
	rate := float64(count()-n0) / 10
	t.Logf("measured over 10 s of virtual time: %.1f WebSocket messages/s (limit 10/s)", rate)
	assert.InDelta(t, 10, rate, 0.5)
	require.NoError(t, s.Close())
}

func TestAWebSocketServerOverItsMessageLimitInEndModeClosesWith1008(t *testing.T) {
	p := load(t, module(t, "meshlimit"), messageRule(`{"direction":"response","on_limit":"end"}`), 2)
	s := openWS(t, p.VM(0), "ann")
	var burst []byte
	for i := range 12 {
		burst = append(burst, wsText(fmt.Sprint("m", i), false)...)
	}
	_, err := s.SendResponseBody(burst, false)
	require.NoError(t, err)
	var w messages.WebSocket
	got := s.DownstreamBody()
	n, err := w.Feed(got)
	require.NoError(t, err)
	assert.Equal(t, 10, n, "the 10 allowed messages reach the client")
	code, closed := w.Closed()
	assert.True(t, closed, "then a close frame")
	assert.Equal(t, uint16(1008), code)
	assert.False(t, s.Reset(), "not yet: the close frame goes out first")
	p.Clock().Advance(10 * time.Millisecond)
	assert.True(t, s.Reset(), "the next tick resets the stream")
}

func TestAWebSocketClientOverItsMessageLimitInEndModeGetsTheServersEchoOfClose1008(t *testing.T) {
	p := load(t, module(t, "meshlimit"), messageRule(`{"direction":"request","on_limit":"end"}`), 2)
	s := openWS(t, p.VM(1), "ann")
	var burst []byte
	for i := range 12 {
		burst = append(burst, wsText(fmt.Sprint("m", i), true)...)
	}
	_, err := s.SendRequestBody(burst, false)
	require.NoError(t, err)
	server := messages.WebSocket{FromClient: true}
	n, err := server.Feed(s.UpstreamBody())
	require.NoError(t, err)
	assert.Equal(t, 10, n, "the 10 allowed messages reach the server")
	code, closed := server.Closed()
	require.True(t, closed, "then a masked close frame")
	assert.Equal(t, uint16(1008), code)
	// The server echoes the close frame with its code (RFC 6455 §5.5.1), as every server does.
	echo, err := messages.AppendClose(nil, code, "")
	require.NoError(t, err)
	_, err = s.SendResponseBody(echo, false)
	require.NoError(t, err)
	client := messages.WebSocket{}
	_, err = client.Feed(s.DownstreamBody())
	require.NoError(t, err)
	got, closed := client.Closed()
	assert.True(t, closed, "the client gets a close frame, not a bare reset (1006)")
	assert.Equal(t, uint16(1008), got)
	assert.False(t, s.Reset())
	p.Clock().Advance(time.Second + 10*time.Millisecond)
	assert.True(t, s.Reset(), "reset a second after the close frame")
}
