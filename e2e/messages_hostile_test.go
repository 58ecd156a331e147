package e2e

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/internal/envoyhost"
)

// Hostile streams against message limits on the compiled module: each has a documented outcome
// (docs/threat-model.md, "Limits on the messages of streams"), bounded memory, and never a trap.

func sendUp(t *testing.T, s *envoyhost.Stream, b []byte) envoyhost.Action {
	act, err := s.SendRequestBody(b, false)
	require.NoError(t, err)
	return act
}

func heldUp(s *envoyhost.Stream) bool {
	req, _ := s.Flow()
	return req.Held > 0
}

func noTrap(t *testing.T, p *envoyhost.Plugin) {
	for _, vm := range p.VMs() {
		assert.NoError(t, vm.Failed())
	}
	assert.Zero(t, p.PollOneoffCalls())
}

func TestAClientThatSplitsItsGRPCMessagesAtEveryByteIsCountedExactly(t *testing.T) {
	p := load(t, module(t, "meshlimit"), messageRule(`{"direction":"request"}`), 1)
	s := openGRPC(t, p.VM(0), "ann")
	var stream []byte
	for range 10 {
		stream = append(stream, grpcMessage(4)...)
	}
	for i := range stream {
		sendUp(t, s, stream[i:i+1])
		require.False(t, heldUp(s), "byte %d of the 10 allowed messages", i)
	}
	sendUp(t, s, []byte{0})
	assert.True(t, heldUp(s), "the first byte of the 11th message holds the stream")
	assert.Equal(t, int64(11), counter(p, "meshlimit.messages.counted"))
	p.Clock().Advance(105 * time.Millisecond)
	assert.False(t, heldUp(s), "released when the bucket allows it")
	noTrap(t, p)
}

func TestAClientAnnouncingA4GiBMessageIsChargedOneMessageAndTheGuestKeepsNoneOfIt(t *testing.T) {
	p := load(t, module(t, "meshlimit"), messageRule(`{"direction":"request"}`), 1)
	vm := p.VM(0)
	s := openGRPC(t, vm, "ann")
	before := vm.MemoryBytes()
	require.Equal(t, envoyhost.ActionContinue, sendUp(t, s, []byte{1, 0xff, 0xff, 0xff, 0xff}))
	chunk := bytes.Repeat([]byte{0}, 64<<10)
	const chunks = 256 // 16 MiB of the message's payload
	for range chunks {
		require.Equal(t, envoyhost.ActionContinue, sendUp(t, s, chunk))
	}
	grew := vm.MemoryBytes() - before
	t.Logf("16 MiB of one message's payload passed; the VM's memory grew by %d KiB", grew>>10)
	assert.Less(t, grew, uint64(chunks*len(chunk)/4), "the guest keeps no payload")
	assert.Equal(t, int64(1), counter(p, "meshlimit.messages.counted"))
	noTrap(t, p)
}

func TestAClientThatSendsGarbageAfterAnUpgradeIsReset(t *testing.T) {
	for _, tc := range []struct {
		name  string
		bytes []byte
	}{
		{"HTTP after the 101", []byte("GET /again HTTP/1.1\r\nHost: a.example\r\n\r\n")},
		{"an unmasked frame", wsText("hi", false)},
		{"a reserved opcode", []byte{0x83, 0x80, 1, 2, 3, 4}},
		{"a fragmented ping", []byte{0x09, 0x80, 1, 2, 3, 4}},
		{"a text frame inside a fragmented message", append([]byte{0x01, 0x81, 1, 2, 3, 4, 'a'}, wsText("b", true)...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := load(t, module(t, "meshlimit"), messageRule(`{}`), 1)
			s := openWS(t, p.VM(0), "ann")
			sendUp(t, s, tc.bytes)
			assert.True(t, s.Reset())
			assert.Empty(t, s.UpstreamBody(), "none of it reaches the server")
			assert.Equal(t, int64(1), counter(p, "meshlimit.messages.malformed"))
			noTrap(t, p)
		})
	}
}

func TestAWebSocketClientsMasksFragmentsAndInterleavedControlFramesCountWholeMessages(t *testing.T) {
	p := load(t, module(t, "meshlimit"), messageRule(`{"direction":"request"}`), 1)
	s := openWS(t, p.VM(0), "ann")
	ping := []byte{0x89, 0x80, 5, 6, 7, 8}
	// one message of three fragments (each masked with its own key), a ping and a pong between
	frag := []byte{0x01, 0x81, 1, 2, 3, 4, 'a' ^ 1}
	frag = append(frag, ping...)
	frag = append(frag, 0x00, 0x81, 9, 9, 9, 9, 'b'^9)
	frag = append(frag, 0x8a, 0x80, 1, 1, 1, 1)
	frag = append(frag, 0x80, 0x81, 7, 7, 7, 7, 'c'^7)
	for range 10 {
		require.Equal(t, envoyhost.ActionContinue, sendUp(t, s, frag))
	}
	sendUp(t, s, ping)
	assert.False(t, heldUp(s), "control frames are not messages")
	sendUp(t, s, wsText("x", true))
	assert.True(t, heldUp(s), "the 11th message")
	assert.Equal(t, int64(11), counter(p, "meshlimit.messages.counted"))
	noTrap(t, p)
}

func TestAClientThatStopsReadingWhileShapedIsPushedBackThenResetAtMaxHold(t *testing.T) {
	p := load(t, module(t, "meshlimit"), messageRule(`{"direction":"response","max_hold":"3s"}`), 1,
		func(c *envoyhost.Config) { c.BufferLimit = 64 << 10 })
	s := openGRPC(t, p.VM(0), "ann")
	msg := grpcMessage(2000)
	// The server streams 2 KB messages ahead of the rate; the client reads none of them and the
	// filter holds them past the 10 allowed: Envoy stops reading the upstream at its buffer limit.
	// 35 owed fit in what 3 s may admit (10 + 30), so the hold waits for max_hold.
	for range 45 {
		_, err := s.SendResponseBody(msg, false)
		require.NoError(t, err)
	}
	_, resp := s.Flow()
	assert.True(t, resp.ReadDisabled, "flow control pushed back on the upstream")
	assert.LessOrEqual(t, resp.Held, 45*len(msg), "Envoy holds it; the guest copies each chunk once")
	p.Clock().Advance(2900 * time.Millisecond)
	assert.False(t, s.Reset(), "held within max_hold")
	p.Clock().Advance(200 * time.Millisecond)
	assert.True(t, s.Reset(), "35 owed messages need 3.5 s: reset at max_hold")
	assert.Equal(t, 10, grpcCount(t, s.DownstreamBody()), "only the allowed ones reached the client")
	assert.Zero(t, counter(p, "meshlimit.messages.held"))
	noTrap(t, p)
}

func TestThousandsOfHeldStreamsCostTheGuestLittleAndAreAllReleased(t *testing.T) {
	p := load(t, module(t, "meshlimit"),
		`{"rules":[{"name":"chat","key":[{"header":"x-user"}],"max_keys":65536,"limits":[{"rate":"10/s"}],"messages":{"per_stream":true,"direction":"request"}}]}`, 2)
	var before uint64
	for _, vm := range p.VMs() {
		before += vm.MemoryBytes()
	}
	const n = 2000
	var body []byte
	for range 11 {
		body = append(body, grpcMessage(2)...)
	}
	streams := make([]*envoyhost.Stream, n)
	for i := range streams {
		streams[i] = openGRPC(t, p.VM(i%2), fmt.Sprint("u", i))
		sendUp(t, streams[i], body)
		require.True(t, heldUp(streams[i]))
	}
	var after uint64
	for _, vm := range p.VMs() {
		after += vm.MemoryBytes()
	}
	t.Logf("%d held streams: the VMs' memory grew by %d KiB (%d B a stream)", n, (after-before)>>10, (after-before)/n)
	assert.Less(t, (after-before)/n, uint64(8<<10), "a held stream costs the guest its context and one entry, not its bytes")
	assert.Equal(t, int64(n), counter(p, "meshlimit.messages.held"))
	p.Clock().Advance(105 * time.Millisecond)
	for i, s := range streams {
		require.False(t, heldUp(s), "stream %d released", i)
		require.NoError(t, s.Close())
	}
	assert.Zero(t, counter(p, "meshlimit.messages.held"))
	noTrap(t, p)
}
