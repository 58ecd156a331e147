package filter

import (
	"encoding/binary"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/meshlimit/meshlimit/messages"
)

// The message limiter (messages.go, messages_limit.go) on the fake host.

// msgConfig is a rule of 10 messages/s per x-user with the given messages block.
func msgConfig(block string) string {
	return `{"rules":[{"name":"chat","key":[{"header":"x-user"}],"limits":[{"rate":"10/s"}],"messages":` + block + `}]}`
}

// grpcMsgs is n length-prefixed gRPC messages of size bytes each.
func grpcMsgs(n, size int) string {
	var b []byte
	for range n {
		b = append(b, 0)
		b = binary.BigEndian.AppendUint32(b, uint32(size))
		b = append(b, strings.Repeat("m", size)...)
	}
	return string(b)
}

// wsFrame is one WebSocket frame with FIN fin, opcode op and a short payload, masked when from
// the client.
func wsFrame(fin bool, op byte, payload string, fromClient bool) string {
	b0 := op
	if fin {
		b0 |= 0x80
	}
	b := []byte{b0, byte(len(payload))}
	if fromClient {
		b[1] |= 0x80
		key := [4]byte{1, 2, 3, 4}
		b = append(b, key[:]...)
		for i := range len(payload) {
			b = append(b, payload[i]^key[i%4])
		}
		return string(b)
	}
	return string(append(b, payload...))
}

func wsMsgs(n int, fromClient bool) string {
	return strings.Repeat(wsFrame(true, 1, "hi", fromClient), n)
}

func grpcReq(user string) [][2]string {
	return [][2]string{{":method", "POST"}, {":path", "/chat.Chat/Talk"}, {":authority", "a.example"},
		{"content-type", "application/grpc+proto"}, {"x-user", user}}
}

func wsReq(user string) [][2]string {
	return fakeReq("/ws", [2]string{"upgrade", "websocket"}, [2]string{"connection", "upgrade"}, [2]string{"x-user", user})
}

// deliver delivers one streamed chunk of direction p: the callback sees only it, as Envoy hands a
// chunk after a watermark stop.
func (f *fakeHost) deliver(h *httpContext, p part, chunk string) types.Action {
	s := f.of(h)
	f.cur = s
	defer f.leave()
	if p == requestPart {
		s.reqBody = []byte(chunk)
		return h.OnHttpRequestBody(len(chunk), false)
	}
	s.respBody = []byte(chunk)
	return h.OnHttpResponseBody(len(chunk), false)
}

func (f *fakeHost) tickAfter(p *pluginContext, d time.Duration) {
	f.advance(d)
	f.tickNow(p)
}

func TestAGRPCStreamOverItsMessageRateIsHeldUntilTheTickAllowsTheNextMessage(t *testing.T) {
	f := newFakeHost(t)
	p := f.start(msgConfig(`{}`))
	assert.Equal(t, uint32(shapeTickMillis), f.tick, "a message limit needs the tick")
	h, act := f.open(p, grpcReq("ann"), false)
	require.Equal(t, types.ActionContinue, act, "the request itself is not charged")

	assert.Equal(t, types.ActionContinue, f.deliver(h, requestPart, grpcMsgs(10, 3)), "the burst passes")
	assert.Equal(t, actionWatermark, f.deliver(h, requestPart, grpcMsgs(1, 3)), "the 11th message holds the stream")
	assert.Equal(t, actionWatermark, f.deliver(h, requestPart, grpcMsgs(1, 3)), "a held stream holds every chunk")
	assert.Equal(t, int64(1), f.counter("meshlimit.messages.held"))

	f.tickAfter(p, 150*time.Millisecond)
	assert.Zero(t, f.of(h).resumed[requestPart], "two messages are owed, one was allowed")
	f.tickAfter(p, 50*time.Millisecond)
	assert.Equal(t, 1, f.of(h).resumed[requestPart], "the tick resumes once both are charged")
	assert.Equal(t, int64(0), f.counter("meshlimit.messages.held"))
	assert.Equal(t, int64(12), f.counter("meshlimit.messages.counted"))
	assert.Equal(t, int64(12), f.counter("meshlimit.rule.chat.allowed"))
	assert.Equal(t, types.ActionContinue, f.requestTrailers(h))
	f.end(h)
}

func TestEachDirectionOfABidirectionalStreamHasItsOwnBucket(t *testing.T) {
	f := newFakeHost(t)
	p := f.start(msgConfig(`{"direction":"both"}`))
	h, _ := f.open(p, grpcReq("ann"), false)
	f.respond(h, [][2]string{{":status", "200"}, {"content-type", "application/grpc"}}, false)
	assert.Equal(t, types.ActionContinue, f.deliver(h, requestPart, grpcMsgs(10, 1)))
	assert.Equal(t, types.ActionContinue, f.deliver(h, responsePart, grpcMsgs(10, 1)), "the response has its own 10")
	assert.Equal(t, actionWatermark, f.deliver(h, responsePart, grpcMsgs(1, 1)))
	assert.True(t, f.of(h).resumed == [2]int{}, "nothing resumed yet")
	assert.Equal(t, types.ActionPause, f.responseTrailers(h), "trailers wait behind the held body")
	f.tickAfter(p, 100*time.Millisecond)
	assert.Equal(t, [2]int{0, 1}, f.of(h).resumed)
	f.end(h)
}

func TestAKeysStreamsShareOneMessageBucketAndAPerStreamLimitDoesNot(t *testing.T) {
	for _, tc := range []struct {
		name      string
		block     string
		secondGot types.Action
	}{
		{"streams of a key share its bucket", `{}`, actionWatermark},
		{"per_stream gives each stream its own", `{"per_stream":true}`, types.ActionContinue},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeHost(t)
			p := f.start(msgConfig(tc.block))
			a, _ := f.open(p, grpcReq("ann"), false)
			b, _ := f.open(p, grpcReq("ann"), false)
			other, _ := f.open(p, grpcReq("bob"), false)
			assert.Equal(t, types.ActionContinue, f.deliver(a, requestPart, grpcMsgs(6, 1)))
			assert.Equal(t, tc.secondGot, f.deliver(b, requestPart, grpcMsgs(5, 1)))
			assert.Equal(t, types.ActionContinue, f.deliver(other, requestPart, grpcMsgs(10, 1)), "another key is not affected")
			fb := f.of(b)
			f.end(b)
			assert.Equal(t, int64(0), f.counter("meshlimit.messages.held"), "an ended stream's hold is forgotten")
			f.tickAfter(p, time.Second)
			assert.Zero(t, fb.resumed[requestPart], "a gone stream is never resumed")
		})
	}
}

func TestAClientHoldingManyPerStreamStreamsOfOneKeyLeavesAnotherKeysNewStreamItsWholeRate(t *testing.T) {
	f := newFakeHost(t)
	p := f.start(strings.Replace(msgConfig(`{"per_stream":true,"direction":"request"}`), `"messages"`, `"max_keys":16,"messages"`, 1))
	for range 200 {
		h, _ := f.open(p, grpcReq("mallory"), false)
		require.Equal(t, actionWatermark, f.deliver(h, requestPart, grpcMsgs(30, 1)), "each of mallory's streams has its own 10")
	}
	victim, _ := f.open(p, grpcReq("victim"), false)
	assert.Equal(t, types.ActionContinue, f.deliver(victim, requestPart, grpcMsgs(10, 1)), "another key's new stream gets its 10")
	assert.Equal(t, actionWatermark, f.deliver(victim, requestPart, grpcMsgs(1, 1)), "and no more")
	assert.Zero(t, f.counter("meshlimit.rule.chat.overflow"), "no stream was crowded into the overflow state")
}

func TestAShapedChunkHoldingMoreMessagesThanMaxHoldCanAdmitEndsTheStreamAtOnce(t *testing.T) {
	// 10/s for 30s admits at most 10 + 300: a chunk of 400 could only be reset at max_hold
	grpcRes := [][2]string{{":status", "200"}, {"content-type", "application/grpc"}}
	t.Run("gRPC before the response gets a trailers-only RESOURCE_EXHAUSTED", func(t *testing.T) {
		f := newFakeHost(t)
		p := f.start(msgConfig(`{}`))
		h, _ := f.open(p, grpcReq("ann"), false)
		assert.Equal(t, types.ActionPause, f.deliver(h, requestPart, grpcMsgs(400, 1)))
		require.NotNil(t, f.of(h).reply)
		assert.Equal(t, int32(8), f.of(h).reply.grpc)
		assert.Empty(t, p.msgs.held)
	})
	t.Run("gRPC after the response started is reset", func(t *testing.T) {
		f := newFakeHost(t)
		p := f.start(msgConfig(`{}`))
		h, _ := f.open(p, grpcReq("ann"), false)
		f.respond(h, grpcRes, false)
		assert.Equal(t, actionDrop, f.deliver(h, requestPart, grpcMsgs(400, 1)))
		assert.Equal(t, 1, f.of(h).closed, "reset now, not after 30s")
		assert.Empty(t, p.msgs.held)
	})
	t.Run("a WebSocket client's chunk goes on with its allowed messages and a close frame", func(t *testing.T) {
		f := newFakeHost(t)
		p := f.start(msgConfig(`{"direction":"request"}`))
		h, _ := f.open(p, wsReq("ann"), true)
		f.respond(h, [][2]string{{":status", "101"}}, false)
		assert.Equal(t, types.ActionContinue, f.deliver(h, requestPart, wsMsgs(400, true)))
		server := messages.WebSocket{FromClient: true}
		n, err := server.Feed(f.of(h).reqBody)
		require.NoError(t, err)
		assert.Equal(t, 10, n, "the charged prefix reaches the server")
		code, closed := server.Closed()
		assert.True(t, closed)
		assert.Equal(t, uint16(1008), code)
	})
	t.Run("a held stream whose later chunks owe too much is reset at once", func(t *testing.T) {
		f := newFakeHost(t)
		p := f.start(msgConfig(`{}`))
		h, _ := f.open(p, grpcReq("ann"), false)
		f.respond(h, grpcRes, false)
		assert.Equal(t, actionWatermark, f.deliver(h, requestPart, grpcMsgs(200, 1)), "200 fit in 30s: held")
		assert.Equal(t, actionWatermark, f.deliver(h, requestPart, grpcMsgs(100, 1)), "300 still fit")
		assert.Zero(t, f.of(h).closed)
		assert.Equal(t, actionDrop, f.deliver(h, requestPart, grpcMsgs(100, 1)), "400 never fit")
		assert.Equal(t, 1, f.of(h).closed)
		f.tickAfter(p, 10*time.Millisecond)
		assert.Empty(t, p.msgs.held)
		assert.Zero(t, f.of(h).resumed[requestPart], "what was held is never let go")
	})
	t.Run("a chunk that fits in max_hold is held until it is charged", func(t *testing.T) {
		f := newFakeHost(t)
		p := f.start(msgConfig(`{"max_hold":"2s"}`))
		h, _ := f.open(p, grpcReq("ann"), false)
		assert.Equal(t, actionWatermark, f.deliver(h, requestPart, grpcMsgs(30, 1)), "10 + 20 in 2s")
		for range 40 {
			f.tickAfter(p, 50*time.Millisecond)
		}
		assert.Equal(t, 1, f.of(h).resumed[requestPart])
		assert.Zero(t, f.of(h).closed)
	})
}

func TestAGRPCStreamOverItsLimitInEndModeGetsResourceExhausted(t *testing.T) {
	f := newFakeHost(t)
	p := f.start(msgConfig(`{"on_limit":"end"}`))
	h, _ := f.open(p, grpcReq("ann"), false)
	assert.Equal(t, types.ActionContinue, f.deliver(h, requestPart, grpcMsgs(10, 1)))
	assert.Equal(t, types.ActionPause, f.deliver(h, requestPart, grpcMsgs(1, 1)))
	r := f.of(h).reply
	require.NotNil(t, r, "a trailers-only answer before the response started")
	assert.Equal(t, uint32(429), r.status)
	assert.Equal(t, int32(messages.GRPCStatusResourceExhausted), r.grpc)
	assert.Equal(t, messageLimitText, string(r.body))
	assert.Equal(t, actionDrop, f.deliver(h, requestPart, grpcMsgs(1, 1)), "an ended stream's later chunks are dropped")
	assert.Equal(t, int64(1), f.counter("meshlimit.messages.ended"))
}

func TestAGRPCStreamWhoseResponseStartedIsResetAtItsLimitInEndMode(t *testing.T) {
	f := newFakeHost(t)
	p := f.start(msgConfig(`{"on_limit":"end"}`))
	h, _ := f.open(p, grpcReq("ann"), false)
	f.respond(h, [][2]string{{":status", "200"}}, false)
	f.deliver(h, requestPart, grpcMsgs(10, 1))
	assert.Equal(t, actionDrop, f.deliver(h, requestPart, grpcMsgs(1, 1)))
	assert.Nil(t, f.of(h).reply, "Envoy would drop a reply after the response started")
	assert.Equal(t, 1, f.of(h).closed)
}

func TestAWebSocketServerOverItsLimitInEndModeSendsTheClientACloseFrame1008(t *testing.T) {
	f := newFakeHost(t)
	p := f.start(msgConfig(`{"on_limit":"end","direction":"response"}`))
	h, _ := f.open(p, wsReq("ann"), true)
	f.respond(h, [][2]string{{":status", "101"}, {"upgrade", "websocket"}}, false)
	allowed := wsMsgs(10, false)
	assert.Equal(t, types.ActionContinue, f.deliver(h, responsePart, allowed[:7]))
	assert.Equal(t, types.ActionContinue, f.deliver(h, responsePart, allowed[7:]+wsMsgs(2, false)))
	want, err := messages.AppendClose([]byte(allowed[7:]), 1008, messageLimitText)
	require.NoError(t, err)
	assert.Equal(t, string(want), string(f.of(h).respBody), "the allowed messages, then the close frame in place of the rest")
	assert.Zero(t, f.of(h).closed)
	f.tickNow(p)
	assert.Equal(t, 1, f.of(h).closed, "the tick after the close frame resets the stream")
	assert.Equal(t, actionDrop, f.deliver(h, requestPart, wsMsgs(1, true)))
}

func TestAWebSocketHeldToItsRateCountsWholeMessagesNotFramesOrControlFrames(t *testing.T) {
	f := newFakeHost(t)
	p := f.start(msgConfig(`{"direction":"request"}`))
	h, _ := f.open(p, wsReq("ann"), true)
	f.respond(h, [][2]string{{":status", "101"}}, false)
	// 9 messages, one of them in three fragments with pings and a pong between them
	frag := wsFrame(false, 1, "a", true) + wsFrame(true, 9, "p", true) + wsFrame(false, 0, "b", true) +
		wsFrame(true, 10, "q", true) + wsFrame(true, 0, "c", true)
	assert.Equal(t, types.ActionContinue, f.deliver(h, requestPart, wsMsgs(8, true)+frag))
	assert.Equal(t, types.ActionContinue, f.deliver(h, requestPart, wsMsgs(1, true)+wsFrame(true, 9, "", true)))
	assert.Equal(t, actionWatermark, f.deliver(h, requestPart, wsMsgs(1, true)), "the 11th message")
	assert.Equal(t, int64(11), f.counter("meshlimit.messages.counted"))
	f.end(h)
}

func TestAnUpgradeTheServerRefusesIsNotCountedAsAWebSocket(t *testing.T) {
	f := newFakeHost(t)
	p := f.start(msgConfig(`{}`))
	h, _ := f.open(p, wsReq("ann"), true)
	f.respond(h, [][2]string{{":status", "403"}}, false)
	assert.Equal(t, types.ActionContinue, f.deliver(h, responsePart, "forbidden, not frames"))
	assert.Zero(t, f.counter("meshlimit.messages.malformed"))
}

func TestARequestThatIsNeitherGRPCNorAWebSocketIsNotCounted(t *testing.T) {
	f := newFakeHost(t)
	p := f.start(msgConfig(`{}`))
	for _, ct := range []string{"application/grpc-web", "application/json", "application/grpcx"} {
		h, _ := f.open(p, fakeReq("/", [2]string{"content-type", ct}, [2]string{"x-user", "ann"}), false)
		assert.Equal(t, types.ActionContinue, f.deliver(h, requestPart, grpcMsgs(20, 1)), ct)
		f.end(h)
	}
	assert.Zero(t, f.counter("meshlimit.messages.counted"))
}

func TestAShadowMessageRuleCountsWhatItWouldHoldAndHoldsNothing(t *testing.T) {
	f := newFakeHost(t)
	p := f.start(strings.Replace(msgConfig(`{}`), `"messages"`, `"shadow":true,"messages"`, 1))
	h, _ := f.open(p, grpcReq("ann"), false)
	assert.Equal(t, types.ActionContinue, f.deliver(h, requestPart, grpcMsgs(15, 1)))
	assert.Equal(t, int64(5), f.counter("meshlimit.rule.chat.shadow_limited"))
}

func TestGRPCMessagesSplitAtEveryByteAreCountedExactly(t *testing.T) {
	f := newFakeHost(t)
	p := f.start(msgConfig(`{}`))
	h, _ := f.open(p, grpcReq("ann"), false)
	stream := grpcMsgs(10, 2)
	for i := range len(stream) {
		require.Equal(t, types.ActionContinue, f.deliver(h, requestPart, stream[i:i+1]), "byte %d", i)
	}
	assert.Equal(t, actionWatermark, f.deliver(h, requestPart, "\x00"), "the 11th message's flag byte holds it")
	assert.Equal(t, int64(11), f.counter("meshlimit.messages.counted"))
}

func TestAGRPCLengthPrefixOf4GiBCostsOneMessageAndNoMemory(t *testing.T) {
	f := newFakeHost(t)
	p := f.start(msgConfig(`{}`))
	h, _ := f.open(p, grpcReq("ann"), false)
	assert.Equal(t, types.ActionContinue, f.deliver(h, requestPart, "\x01\xff\xff\xff\xff"+strings.Repeat("x", 1<<16)))
	for range 16 {
		assert.Equal(t, types.ActionContinue, f.deliver(h, requestPart, strings.Repeat("\x00", 1<<16)), "payload, not messages")
	}
	assert.Equal(t, int64(1), f.counter("meshlimit.messages.counted"))
	assert.Less(t, cap(p.msgs.out)+cap(p.msgs.buf), 1<<10, "the limiter kept none of it")
}

func TestHostileFramingResetsTheStream(t *testing.T) {
	for _, tc := range []struct {
		name  string
		req   [][2]string
		p     part
		bytes string
	}{
		{"garbage after an upgrade", wsReq("ann"), requestPart, "GET / HTTP/1.1\r\n\r\n"},
		{"an unmasked frame from the client", wsReq("ann"), requestPart, wsMsgs(1, false)},
		{"a masked frame from the server", wsReq("ann"), responsePart, wsMsgs(1, true)},
		{"a fragmented control frame", wsReq("ann"), requestPart, wsFrame(false, 9, "p", true)},
		{"a data frame interleaved into a fragmented message", wsReq("ann"), requestPart, wsFrame(false, 1, "a", true) + wsFrame(true, 1, "b", true)},
		{"a gRPC flag byte that is neither 0 nor 1", grpcReq("ann"), requestPart, "\x02\x00\x00\x00\x00"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeHost(t)
			p := f.start(msgConfig(`{}`))
			h, _ := f.open(p, tc.req, false)
			f.respond(h, [][2]string{{":status", "101"}}, false)
			assert.Equal(t, actionDrop, f.deliver(h, tc.p, tc.bytes))
			assert.Equal(t, 1, f.of(h).closed)
			assert.Equal(t, int64(1), f.counter("meshlimit.messages.malformed"))
			assert.Equal(t, actionDrop, f.deliver(h, requestPart, wsMsgs(1, true)), "nothing more passes")
		})
	}
}

func TestAClientThatStopsReadingWhileShapedIsResetAfterMaxHold(t *testing.T) {
	f := newFakeHost(t)
	p := f.start(msgConfig(`{"direction":"response","max_hold":"2s"}`))
	h, _ := f.open(p, grpcReq("ann"), false)
	f.respond(h, [][2]string{{":status", "200"}}, false)
	// The server keeps writing ahead of the rate: 15 owed messages, and one more each time one
	// is charged, so the owed ones never run out (and never exceed what 2 s admit: no early end).
	assert.Equal(t, actionWatermark, f.deliver(h, responsePart, grpcMsgs(25, 1)))
	for range 19 {
		f.tickAfter(p, 100*time.Millisecond)
		assert.Equal(t, actionWatermark, f.deliver(h, responsePart, grpcMsgs(1, 1)))
	}
	assert.Zero(t, f.of(h).closed, "held within max_hold")
	f.tickAfter(p, 100*time.Millisecond)
	assert.Equal(t, 1, f.of(h).closed, "reset at max_hold")
	assert.Zero(t, f.of(h).resumed[responsePart])
	assert.Equal(t, int64(0), f.counter("meshlimit.messages.held"))
	assert.Equal(t, actionDrop, f.deliver(h, responsePart, grpcMsgs(1, 1)))
}

func TestThousandsOfHeldStreamsCostOneEntryEachAndAreAllReleased(t *testing.T) {
	f := newFakeHost(t)
	// per_stream buckets live in the streams' VM: no max_keys room is needed for them
	p := f.start(strings.Replace(msgConfig(`{"per_stream":true}`), `"messages"`, `"max_keys":16,"messages"`, 1))
	const n = 3000
	hs := make([]*httpContext, n)
	for i := range hs {
		hs[i], _ = f.open(p, grpcReq(fmt.Sprint("u", i%7)), false)
		require.Equal(t, actionWatermark, f.deliver(hs[i], requestPart, grpcMsgs(11, 0)))
	}
	assert.Equal(t, int64(n), f.counter("meshlimit.messages.held"))
	assert.Len(t, p.msgs.held, n)
	f.tickAfter(p, 50*time.Millisecond)
	assert.Len(t, p.msgs.held, n, "none is due before its bucket allows")
	f.tickAfter(p, 50*time.Millisecond)
	assert.Empty(t, p.msgs.held)
	assert.Zero(t, f.counter("meshlimit.rule.chat.overflow"), "every stream had a slot of its own")
	for _, h := range hs {
		require.Equal(t, 1, f.of(h).resumed[requestPart])
		f.end(h)
	}
}

func TestAWebSocketClientOverItsLimitInEndModeGetsTheServersEchoOfACloseFrame1008(t *testing.T) {
	f := newFakeHost(t)
	p := f.start(msgConfig(`{"on_limit":"end","direction":"request"}`))
	h, _ := f.open(p, wsReq("ann"), true)
	f.respond(h, [][2]string{{":status", "101"}}, false)
	assert.Equal(t, types.ActionContinue, f.deliver(h, requestPart, wsMsgs(8, true)))
	assert.Equal(t, types.ActionContinue, f.deliver(h, requestPart, wsMsgs(4, true)))
	server := messages.WebSocket{FromClient: true}
	n, err := server.Feed(f.of(h).reqBody)
	require.NoError(t, err, "the server gets well-formed, masked frames")
	assert.Equal(t, 2, n, "the two allowed messages of the chunk, then the close frame in place of the rest")
	code, closed := server.Closed()
	assert.True(t, closed)
	assert.Equal(t, uint16(1008), code)
	assert.Equal(t, actionDrop, f.deliver(h, requestPart, wsMsgs(1, true)), "nothing more from the client")
	echo, err := messages.AppendClose(nil, 1008, "")
	require.NoError(t, err)
	assert.Equal(t, types.ActionContinue, f.deliver(h, responsePart, string(echo)), "the server's close frame reaches the client")
	f.tickAfter(p, 900*time.Millisecond)
	assert.Zero(t, f.of(h).closed)
	f.tickAfter(p, 100*time.Millisecond)
	assert.Equal(t, 1, f.of(h).closed, "reset a second after the close frame")
}

func TestAWebSocketClientOverItsLimitBeforeThe101InEndModeGetsA429(t *testing.T) {
	f := newFakeHost(t)
	p := f.start(msgConfig(`{"on_limit":"end","direction":"request"}`))
	h, _ := f.open(p, wsReq("ann"), true)
	assert.Equal(t, types.ActionPause, f.deliver(h, requestPart, wsMsgs(12, true)))
	r := f.of(h).reply
	require.NotNil(t, r, "the response has not started: a local reply, not a reset")
	assert.Equal(t, uint32(429), r.status)
	assert.Equal(t, int32(-1), r.grpc)
	assert.Equal(t, messageLimitText, string(r.body))
	assert.Zero(t, f.of(h).closed)
	assert.Equal(t, actionDrop, f.deliver(h, requestPart, wsMsgs(1, true)), "nothing more from the client")
}

func TestAHeldDirectionOfAStreamTheOtherDirectionEndedIsNeverResumed(t *testing.T) {
	f := newFakeHost(t)
	p := f.start(msgConfig(`{"on_limit":"end"}`))
	h, _ := f.open(p, wsReq("ann"), true)
	f.respond(h, [][2]string{{":status", "101"}}, false)
	// end mode never holds: the request direction is held by hand, as shape would hold it
	assert.Equal(t, types.ActionContinue, f.deliver(h, responsePart, wsMsgs(10, false)))
	h.msgs.dirs[requestPart].owed = 1
	p.msgs.hold(h, requestPart, f.clock, 0)
	assert.Equal(t, types.ActionContinue, f.deliver(h, responsePart, wsMsgs(1, false)), "the server's 11th message ends the session with a close frame")
	f.tickAfter(p, time.Second)
	assert.Zero(t, f.of(h).resumed[requestPart], "the ended stream's held request is not let go")
	assert.Empty(t, p.msgs.held)
}

func TestAGRPCContentTypeIsRecognisedInAnyCaseWithParametersButNotGRPCWeb(t *testing.T) {
	for _, tc := range []struct {
		ct   string
		grpc bool
	}{
		{"application/grpc", true},
		{"application/grpc+proto", true},
		{"Application/GRPC", true},
		{"application/grpc;charset=utf-8", true},
		{"application/grpc-web", false},
		{"application/grpc-web+proto", false},
		{"application/grpc ", false},
		{"application/json", false},
		{"application/grp", false},
	} {
		assert.Equal(t, tc.grpc, isGRPC([]byte(tc.ct)), "%q", tc.ct)
	}
}
