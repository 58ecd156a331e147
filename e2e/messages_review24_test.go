package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/internal/envoyhost"
	"github.com/meshlimit/meshlimit/messages"
)

// The findings of the review of message limits (issue 24, R24-1..3), on the compiled module.

// grpcMessages is k messages of size bytes in one chunk.
func grpcMessages(k, size int) []byte {
	var b []byte
	for range k {
		b = append(b, grpcMessage(size)...)
	}
	return b
}

// burstOf is how many of 10 one-message chunks a new stream of user on vm passes before a hold.
func burstOf(t *testing.T, vm *envoyhost.VM, user string) int {
	s := openGRPC(t, vm, user)
	defer func() { _ = s.Close() }()
	n := 0
	for range 10 {
		sendUp(t, s, grpcMessage(1))
		if heldUp(s) {
			break
		}
		n++
	}
	return n
}

func TestAClientHoldingManyPerStreamStreamsOfOneKeyLeavesOtherKeysNewStreamsTheirWholeRate(t *testing.T) {
	const chat = `{"name":"chat","key":[{"header":"x-user"}],"max_keys":16,"limits":[{"rate":"10/s"}],"messages":{"direction":"request","per_stream":true,"max_hold":"4m"}}`
	for _, tc := range []struct {
		name     string
		config   string
		admitted int
	}{
		{"per_stream alone: every stream is admitted, none takes a key slot", `{"rules":[` + chat + `]}`, 200},
		{"with the per-IP concurrency recipe first: the client gets 8 streams", `{"rules":[{"name":"per-ip","key":[{"client_ip":{}}],"limits":[{"concurrency":8}]},` + chat + `]}`, 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := load(t, module(t, "meshlimit"), tc.config, 2)
			admitted := 0
			for i := range 200 {
				s := p.VM(i % 2).NewStream(envoyhost.StreamInfo{SourceAddress: "198.51.100.9:1234"})
				act, err := s.SendRequestHeaders(grpcStream("mallory").Headers, false)
				require.NoError(t, err)
				if act != envoyhost.ActionContinue {
					continue
				}
				admitted++
				_, err = s.SendResponseHeaders(envoyhost.Headers{{":status", "200"}, {"content-type", "application/grpc"}}, false)
				require.NoError(t, err)
				sendUp(t, s, grpcMessages(30, 1))
				require.True(t, heldUp(s), "each of mallory's streams is held past its own 10")
			}
			assert.Equal(t, tc.admitted, admitted)
			p.Clock().Advance(10 * time.Millisecond)
			for vm := range 2 {
				assert.Equal(t, 10, burstOf(t, p.VM(vm), fmt.Sprint("victim", vm)), "another key's new stream on VM %d", vm)
			}
			assert.Zero(t, counter(p, "meshlimit.rule.chat.overflow"))
			noTrap(t, p)
		})
	}
}

func TestAChunkOfMoreMessagesThanMaxHoldCanAdmitEndsItsStreamAtOnceInsteadOfAtMaxHold(t *testing.T) {
	for _, tc := range []struct {
		name        string
		bufferLimit int
		chunk       []byte
	}{
		// 10/s for 30 s admits at most 10 + 300 messages
		{"400 messages written ahead in one 10 KB write", 0, grpcMessages(400, 20)},
		{"one 16 KiB DATA frame of 655 messages, with a 1 KiB buffer limit", 1 << 10, grpcMessages(16384/25, 20)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := load(t, module(t, "meshlimit"), messageRule(`{"direction":"request","max_hold":"30s"}`), 1,
				func(c *envoyhost.Config) {
					if tc.bufferLimit > 0 {
						c.BufferLimit = tc.bufferLimit
					}
				})
			s := openGRPC(t, p.VM(0), "ann")
			sendUp(t, s, tc.chunk)
			assert.True(t, s.Reset(), "reset now: holding it could only end in a reset at max_hold")
			assert.Equal(t, int64(1), counter(p, "meshlimit.messages.ended"))
			assert.Zero(t, counter(p, "meshlimit.messages.held"))
			noTrap(t, p)
		})
	}
}

func TestAChunkThatFitsInMaxHoldIsStillHeldAndDeliveredWhole(t *testing.T) {
	p := load(t, module(t, "meshlimit"), messageRule(`{"direction":"request","max_hold":"30s"}`), 1)
	s := openGRPC(t, p.VM(0), "ann")
	sendUp(t, s, grpcMessages(300, 20))
	require.True(t, heldUp(s))
	for range 290 {
		p.Clock().Advance(100 * time.Millisecond)
	}
	assert.False(t, s.Reset())
	assert.Equal(t, 300, grpcCount(t, s.UpstreamBody()), "10 + 290 charged in 29 s, then released whole")
	noTrap(t, p)
}

func TestAWebSocketClientOverItsLimitBeforeThe101InEndModeGetsA429(t *testing.T) {
	p := load(t, module(t, "meshlimit"), messageRule(`{"direction":"request","on_limit":"end"}`), 1)
	req := wsUpgrade("ann")
	s := p.VM(0).NewStream(req.Info)
	_, err := s.SendRequestHeaders(req.Headers, false)
	require.NoError(t, err)
	var b []byte
	for i := range 12 {
		b = append(b, wsText(fmt.Sprint("m", i), true)...)
	}
	sendUp(t, s, b)
	r := s.LocalReply()
	require.NotNil(t, r, "the upgrade is not answered yet: a local reply")
	assert.Equal(t, 429, r.Status)
	assert.Equal(t, "message rate limit exceeded", string(r.Body))
	w := messages.WebSocket{FromClient: true}
	n, err := w.Feed(s.UpstreamBody())
	require.NoError(t, err)
	assert.Zero(t, n, "nothing of the session reached the server")
	assert.Equal(t, int64(1), counter(p, "meshlimit.messages.ended"))
	noTrap(t, p)
}
