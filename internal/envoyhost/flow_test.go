package envoyhost_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/internal/envoyhost"
)

// The body paths of long streams (docs/envoy-host.md §13), driven through the host tests' guest:
// x-op stream makes each body callback return the values of x-req-action / x-resp-action in turn.

// streamPlugin loads the guest with a 100 ms tick on a virtual clock.
func streamPlugin(t *testing.T, limit int) (*envoyhost.Plugin, *envoyhost.Clock) {
	clock := envoyhost.NewClock(time.Unix(1_700_000_000, 0))
	return newPlugin(t, "guest", envoyhost.Config{Clock: clock, BufferLimit: limit, PluginConfig: []byte("tick=100")}), clock
}

// openStream sends stream request headers (without end of stream) with the guest's ops.
func openStream(t *testing.T, p *envoyhost.Plugin, kv ...string) *envoyhost.Stream {
	t.Helper()
	s := p.VM(0).NewStream(envoyhost.StreamInfo{})
	t.Cleanup(func() { s.Close() })
	act, err := s.SendRequestHeaders(op("stream", kv...), false)
	require.NoError(t, err)
	require.Equal(t, envoyhost.ActionContinue, act)
	return s
}

func send(t *testing.T, s *envoyhost.Stream, dir string, eos bool, chunks ...string) envoyhost.Action {
	t.Helper()
	var act envoyhost.Action
	var err error
	for i, c := range chunks {
		last := eos && i == len(chunks)-1
		if dir == "request" {
			act, err = s.SendRequestBody([]byte(c), last)
		} else {
			act, err = s.SendResponseBody([]byte(c), last)
		}
		require.NoError(t, err)
	}
	return act
}

func metric(p *envoyhost.Plugin, name string) int64 { return p.Process().Metrics()[name].Value }

func TestAWatermarkStopKeepsCallingTheFilterWithEachChunkAlone(t *testing.T) {
	p, _ := streamPlugin(t, 0)
	s := openStream(t, p, "x-req-action", "2")
	act := send(t, s, "request", false, "abc", "de", "f")
	assert.Equal(t, envoyhost.ActionPause, act, "the request is stopped")
	assert.Equal(t, int64(3), metric(p, "req_body_calls"), "every chunk reaches the filter while it is stopped")
	assert.Equal(t, int64(6), metric(p, "req_body_size"), "each callback is passed its own chunk's size")
	assert.Equal(t, int64(6), metric(p, "req_read"), "and can read that chunk only")
	assert.Empty(t, s.UpstreamBody())
	req, _ := s.Flow()
	assert.Equal(t, envoyhost.Flow{Held: 6}, req, "Envoy holds the chunks, below the limit without pausing the client")
}

func TestAResumeFromATickReleasesTheHeldBodyInOneChunkWithoutTheFilter(t *testing.T) {
	p, clock := streamPlugin(t, 0)
	s := openStream(t, p, "x-req-action", "2", "x-release", "tick")
	send(t, s, "request", false, "abc", "de")
	clock.Advance(100 * time.Millisecond)
	assert.Equal(t, []byte("abcde"), s.UpstreamBody())
	req, _ := s.Flow()
	assert.Equal(t, envoyhost.Flow{Chunks: 1}, req, "one write of everything held")
	assert.Equal(t, int64(2), metric(p, "req_body_calls"), "no body callback for the released bytes")
	assert.Equal(t, int64(1), metric(p, "tick_read_1"), "after a watermark stop the body is not readable from a tick (NotFound)")
	act := send(t, s, "request", false, "g")
	assert.Equal(t, envoyhost.ActionPause, act, "the next chunk is the filter's again: it stops it")
	assert.Equal(t, int64(3), metric(p, "req_body_calls"))
}

func TestContinueOnALaterChunkReleasesEverythingHeldWithIt(t *testing.T) {
	p, _ := streamPlugin(t, 0)
	s := openStream(t, p, "x-req-action", "2,1,0")
	assert.Equal(t, envoyhost.ActionPause, send(t, s, "request", false, "ab", "cd"))
	assert.Equal(t, int64(2+2), metric(p, "req_body_size"), "after a watermark stop the next callback sees its chunk alone")
	assert.Equal(t, envoyhost.ActionContinue, send(t, s, "request", false, "ef"))
	assert.Equal(t, int64(2+2+6), metric(p, "req_body_size"), "after a buffer stop the next callback sees all that is held")
	assert.Equal(t, []byte("abcdef"), s.UpstreamBody())
	req, _ := s.Flow()
	assert.Equal(t, 1, req.Chunks)
}

func TestAWatermarkStopPastTheLimitPausesTheSenderInsteadOfFailing(t *testing.T) {
	p, clock := streamPlugin(t, 8)
	s := openStream(t, p, "x-req-action", "2", "x-release", "tick")
	send(t, s, "request", false, "12345")
	req, _ := s.Flow()
	assert.False(t, req.ReadDisabled, "5 of 8 bytes")
	send(t, s, "request", false, "67890", "more")
	req, _ = s.Flow()
	assert.Equal(t, envoyhost.Flow{ReadDisabled: true, Pauses: 1, Held: 14}, req, "Envoy stops reading from the client, once")
	assert.Nil(t, s.LocalReply(), "no 413")
	assert.False(t, s.Reset())
	clock.Advance(100 * time.Millisecond)
	req, _ = s.Flow()
	assert.Equal(t, envoyhost.Flow{Pauses: 1, Chunks: 1}, req, "released: the buffer drained, reading resumes")
	assert.Len(t, s.UpstreamBody(), 14)
}

func TestAHeadersStopPastTheLimitPausesTheSenderInsteadOfFailing(t *testing.T) {
	p := newPlugin(t, "guest", envoyhost.Config{BufferLimit: 4})
	s := p.VM(0).NewStream(envoyhost.StreamInfo{})
	defer s.Close()
	act, err := s.SendRequestHeaders(op("pause"), false)
	require.NoError(t, err)
	require.Equal(t, envoyhost.ActionPause, act)
	_, err = s.SendRequestBody([]byte("123456"), false)
	require.NoError(t, err)
	req, _ := s.Flow()
	assert.Equal(t, envoyhost.Flow{ReadDisabled: true, Pauses: 1, Held: 6}, req, "a headers stop is StopAllIterationAndWatermark")
	assert.Nil(t, s.LocalReply())
}

func TestABufferStopPastTheLimitAnswers413BeforeTheResponseAndResetsAfter(t *testing.T) {
	for _, started := range []bool{false, true} {
		p, _ := streamPlugin(t, 8)
		s := openStream(t, p, "x-req-action", "1")
		if started {
			_, err := s.SendResponseHeaders(envoyhost.Headers{{":status", "200"}, {"content-type", "application/grpc"}}, false)
			require.NoError(t, err)
		}
		act := send(t, s, "request", false, "12345", "67890")
		assert.Equal(t, envoyhost.ActionStop, act)
		if started {
			assert.True(t, s.Reset(), "the response went downstream: Envoy can only reset")
			assert.Nil(t, s.LocalReply())
			continue
		}
		require.NotNil(t, s.LocalReply())
		assert.Equal(t, 413, s.LocalReply().Status)
	}
}

func TestANoBufferStopDropsTheChunk(t *testing.T) {
	p, clock := streamPlugin(t, 0)
	s := openStream(t, p, "x-req-action", "3,0", "x-release", "tick")
	assert.Equal(t, envoyhost.ActionPause, send(t, s, "request", false, "dropped"))
	req, _ := s.Flow()
	assert.Zero(t, req.Held, "nothing is held")
	clock.Advance(100 * time.Millisecond)
	assert.Equal(t, envoyhost.ActionContinue, send(t, s, "request", false, "kept"))
	assert.Equal(t, []byte("kept"), s.UpstreamBody())
}

func TestABodyWriteFollowsEnvoysCopyFromRules(t *testing.T) {
	tests := []struct {
		name, write, want string
		bad               bool
	}{
		{name: "start 0, length 0 prepends", write: "prepend:>", want: ">hello"},
		{name: "a start at or past the end appends", write: "append:<", want: "hello<"},
		{name: "start 0 with a length past the end replaces everything", write: "replace:X", want: "X"},
		{name: "start 0 with a length replaces that many bytes", write: "first:J", want: "Jello"},
		{name: "a start inside the buffer is BadArgument", write: "mid:!", want: "hello", bad: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, _ := streamPlugin(t, 0)
			s := openStream(t, p, "x-write", tc.write)
			_, err := s.SendResponseHeaders(envoyhost.Headers{{":status", "200"}}, false)
			require.NoError(t, err)
			send(t, s, "response", true, "hello")
			assert.Equal(t, tc.want, string(s.DownstreamBody()))
			assert.Equal(t, tc.bad, metric(p, "write_bad_argument") == 1)
		})
	}
}

// upgrade opens a WebSocket session: the upgrade request and the upstream's 101.
func upgrade(t *testing.T, p *envoyhost.Plugin, kv ...string) *envoyhost.Stream {
	t.Helper()
	s := openStream(t, p, append([]string{"upgrade", "websocket", "connection", "Upgrade", "sec-websocket-version", "13"}, kv...)...)
	act, err := s.SendResponseHeaders(envoyhost.Headers{{":status", "101"}, {"upgrade", "websocket"}, {"connection", "Upgrade"}}, false)
	require.NoError(t, err)
	require.Equal(t, envoyhost.ActionContinue, act)
	return s
}

func TestAWebSocketSessionCarriesChunksBothWaysWithoutEndOfStream(t *testing.T) {
	p, _ := streamPlugin(t, 0)
	s := upgrade(t, p)
	status, _ := s.DownstreamHeaders().Get(":status")
	assert.Equal(t, "101", status, "the 101 reaches proxy_on_response_headers and goes downstream")
	_, seen := s.DownstreamHeaders().Get("x-guest-response")
	assert.True(t, seen)
	send(t, s, "request", false, "\x81\x82ab")
	send(t, s, "response", false, "\x81\x02hi")
	send(t, s, "request", false, "\x81\x82cd")
	assert.Equal(t, int64(2), metric(p, "req_body_calls"))
	assert.Equal(t, int64(1), metric(p, "resp_body_calls"))
	assert.Len(t, s.UpstreamBody(), 8)
	assert.Len(t, s.DownstreamBody(), 4)
	require.NoError(t, s.Close(), "the client closes: Envoy resets the stream, no end-of-stream callback")
	assert.Equal(t, int64(1), metric(p, "deletes"))
}

func TestCloseStreamAfterTheResponseStartedResetsTheStream(t *testing.T) {
	p, _ := streamPlugin(t, 0)
	s := upgrade(t, p, "x-close", "response_body")
	assert.Equal(t, envoyhost.ActionStop, send(t, s, "response", false, "\x81\x02hi"))
	assert.True(t, s.Reset())
	assert.Nil(t, s.LocalReply())
	assert.Equal(t, envoyhost.ActionStop, send(t, s, "request", false, "late"), "a reset stream takes no more data")
	assert.Equal(t, int64(0), metric(p, "req_body_calls"))
}

func TestALocalReplyAfterTheResponseStartedIsAReset(t *testing.T) {
	p, _ := streamPlugin(t, 0)
	s := openStream(t, p, "content-type", "application/grpc", "x-reply-on", "request_body")
	_, err := s.SendResponseHeaders(envoyhost.Headers{{":status", "200"}, {"content-type", "application/grpc"}}, false)
	require.NoError(t, err)
	assert.Equal(t, envoyhost.ActionStop, send(t, s, "request", false, "\x00\x00\x00\x00\x00"))
	assert.True(t, s.Reset(), "the client's response started: the reply cannot be sent")
	assert.Nil(t, s.LocalReply())
	status, _ := s.DownstreamHeaders().Get(":status")
	assert.Equal(t, "200", status, "what the client got stays the upstream's")
}

func TestAGRPCLocalReplyBeforeTheResponseIsTrailersOnly(t *testing.T) {
	p, _ := streamPlugin(t, 0)
	s := openStream(t, p, "content-type", "application/grpc", "x-reply-on", "request_body")
	assert.Equal(t, envoyhost.ActionStop, send(t, s, "request", false, "\x00\x00\x00\x00\x00"))
	require.NotNil(t, s.LocalReply())
	assert.Equal(t, envoyhost.Headers{
		{":status", "200"}, {"x-limit", "messages"}, {"content-type", "application/grpc"}, {"grpc-status", "8"},
		{"grpc-message", "over the limit"}, {"x-guest-response", "2"},
	}, s.DownstreamHeaders(), "through the filter's response callbacks")
	assert.Empty(t, s.DownstreamBody(), "the message travels in grpc-message")
}

func TestALocalReplyWhileTheFilterHoldsTheResponseHeadersGoesStraightToTheClient(t *testing.T) {
	p, _ := streamPlugin(t, 0)
	s := openStream(t, p, "content-type", "application/grpc+proto", "x-reply-on", "response_headers")
	act, err := s.SendResponseHeaders(envoyhost.Headers{{":status", "200"}, {"content-type", "application/grpc"}}, false)
	require.NoError(t, err)
	assert.Equal(t, envoyhost.ActionStop, act)
	assert.Equal(t, envoyhost.Headers{
		{":status", "200"}, {"x-limit", "messages"}, {"content-type", "application/grpc"}, {"grpc-status", "8"},
		{"grpc-message", "over the limit"},
	}, s.DownstreamHeaders(), "past the filter: the upstream's headers, with what the filter added, are gone")
	assert.False(t, s.Reset())
}

func TestABidirectionalGRPCStreamInterleavesBodiesAndEndsWithTrailers(t *testing.T) {
	p, _ := streamPlugin(t, 0)
	s := openStream(t, p, "content-type", "application/grpc")
	msg := "\x00\x00\x00\x00\x02hi"
	send(t, s, "request", false, msg)
	_, err := s.SendResponseHeaders(envoyhost.Headers{{":status", "200"}, {"content-type", "application/grpc"}}, false)
	require.NoError(t, err)
	send(t, s, "response", false, msg)
	send(t, s, "request", true, msg)
	send(t, s, "response", false, msg, msg)
	act, err := s.SendResponseTrailers(envoyhost.Headers{{"grpc-status", "0"}})
	require.NoError(t, err)
	assert.Equal(t, envoyhost.ActionContinue, act)
	assert.Equal(t, strings.Repeat(msg, 2), string(s.UpstreamBody()))
	assert.Equal(t, strings.Repeat(msg, 3), string(s.DownstreamBody()))
	assert.Equal(t, int64(2), metric(p, "req_body_calls"))
	assert.Equal(t, int64(3), metric(p, "resp_body_calls"))
}
