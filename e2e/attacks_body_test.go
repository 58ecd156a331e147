package e2e

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/internal/envoyhost"
	"github.com/meshlimit/meshlimit/internal/redistest"
)

// Attacks on the reservations read from request bodies and the settlements read from answers: each
// test is a client (or a cut) trying to pay less than the upstream serves it.

// tokenCharge is a token budget of 1000 per user per day charged from max_tokens when the request
// is decided (no settle: the reservation is the cost), default 1, at most 1000.
const tokenCharge = `{"rules": [{"name": "tokens", "key": [{"header": "x-user"}], "limits": [{"rate": "1000/d"}],
	"cost": {"request_json": "max_tokens", "default": 1, "max": 1000, "max_body": 32768}}]}`

// utf16 returns s (ASCII) in UTF-16, little-endian or big-endian.
func utf16(s string, little bool) string {
	var b strings.Builder
	for _, c := range []byte(s) {
		if little {
			b.WriteByte(c)
			b.WriteByte(0)
		} else {
			b.WriteByte(0)
			b.WriteByte(c)
		}
	}
	return b.String()
}

// TestAClientCannotPayTheDefaultForABodyTheUpstreamReadsAsAThousandTokens: bodies that a lenient
// upstream (Python's json, pydantic's lax integers, Go's case-insensitive field match) reads as
// max_tokens 1000, but that a strict reading would take for a missing or bad field and charge the
// default (1): each is charged at least 1000, so the next request of the user does not fit.
func TestAClientCannotPayTheDefaultForABodyTheUpstreamReadsAsAThousandTokens(t *testing.T) {
	p := load(t, module(t, "meshlimit"), tokenCharge, 1)
	tests := []struct{ name, body string }{
		{"an exponent", `{"max_tokens": 1e3}`},
		{"a fraction of zero", `{"max_tokens": 1000.0}`},
		{"a fraction just below", `{"max_tokens": 999.5}`},
		{"a string holding the number", `{"max_tokens": "1000"}`},
		{"the member name escaped", `{"max\u005ftokens": 1000}`},
		{"the member name in upper case after a small copy", `{"max_tokens": 1, "MAX_TOKENS": 1000}`},
		{"a byte order mark", "\ufeff" + `{"max_tokens": 1000}`},
		{"UTF-16LE", utf16(`{"max_tokens": 1000}`, true)},
		{"an integer too large for 64 bits", `{"max_tokens": 100000000000000000000000000}`},
		{"UTF-16BE with its byte order mark", "\xfe\xff" + utf16(`{"max_tokens": 1000}`, false)},
		{"a NaN elsewhere, which Python's json reads", `{"temperature": NaN, "max_tokens": 1000}`},
		{"nested deeper than Go's json reads", `{"x": ` + strings.Repeat("[", 10001) + strings.Repeat("]", 10001) + `, "max_tokens": 1}`},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			user := "u" + strconv.Itoa(i)
			s, ok := postJSON(t, p.VM(0), user, tt.body)
			require.True(t, ok)
			require.NoError(t, s.Close())
			_, ok = postJSON(t, p.VM(0), user, maxTokens(1))
			assert.False(t, ok, "the first body was charged at least 1000")
		})
	}
	assert.Zero(t, counter(p, "meshlimit.panics"))
}

// TestAClientThatEndsItsBodyWithTrailersIsChargedWhatTheBodySays: HTTP/2 lets a client end its body
// with trailers instead of end_of_stream. The body is whole and the upstream reads it: the held body
// is read when the trailers come, and max_tokens 1000 is charged, not the default.
func TestAClientThatEndsItsBodyWithTrailersIsChargedWhatTheBodySays(t *testing.T) {
	p := load(t, module(t, "meshlimit"), tokenCharge, 1)
	s := p.VM(0).NewStream(envoyhost.StreamInfo{})
	_, err := s.SendRequestHeaders(envoyhost.Headers{{":method", "POST"}, {":path", "/v1/x"}, {":authority", "llm.test"}, {"x-user", "alice"}}, false)
	require.NoError(t, err)
	half := maxTokens(1000)
	for _, c := range []string{half[:7], half[7:]} {
		act, err := s.SendRequestBody([]byte(c), false)
		require.NoError(t, err)
		assert.Equal(t, envoyhost.ActionPause, act, "held until it ends")
	}
	act, err := s.SendRequestTrailers(envoyhost.Headers{{"x-checksum", "1"}})
	require.NoError(t, err)
	assert.Equal(t, envoyhost.ActionContinue, act)
	assert.Equal(t, maxTokens(1000), string(s.UpstreamBody()))
	require.NoError(t, s.Close())
	_, ok := postJSON(t, p.VM(0), "alice", maxTokens(1))
	assert.False(t, ok, "1000 were charged")
	assert.Zero(t, counter(p, "meshlimit.rule.tokens.bad_body"))
}

// TestAClientThatLeavesAnEventStreamAfterAnEarlyUsageEventKeepsItsReservation: some upstreams report
// usage as the stream goes (an early event with output_tokens 1, the final count last). A client
// that reads what it wants and resets the stream before the last event must not settle to the early
// count: below the reservation it is not taken, and the reservation (800) is kept.
func TestAClientThatLeavesAnEventStreamAfterAnEarlyUsageEventKeepsItsReservation(t *testing.T) {
	p := load(t, module(t, "meshlimit"), budgetConfig("", ""), 1)
	s, ok := postJSON(t, p.VM(0), "alice", maxTokens(800))
	require.True(t, ok)
	cutAnswer(t, s, "text/event-stream", "data: {\"usage\": {\"total_tokens\": 5}}\n\ndata: {\"text\": \"lots of tokens\"}\n\n") // the client goes away before the final usage
	assert.Equal(t, int64(1), counter(p, "meshlimit.rule.tokens.settle_kept"))
	assert.Zero(t, counter(p, "meshlimit.rule.tokens.settle_refund"))
	_, ok = postJSON(t, p.VM(0), "alice", maxTokens(201))
	assert.False(t, ok, "800 stay reserved")
}

// TestAnEventStreamCutShortStillChargesAnOverRunItSaw: the same cut, after an event whose usage is
// above the reservation: that over-run is charged (a cut never lowers the charge).
func TestAnEventStreamCutShortStillChargesAnOverRunItSaw(t *testing.T) {
	p := load(t, module(t, "meshlimit"), budgetConfig("", ""), 1)
	s, ok := postJSON(t, p.VM(0), "alice", maxTokens(100))
	require.True(t, ok)
	cutAnswer(t, s, "text/event-stream", "data: {\"usage\": {\"total_tokens\": 900}}\n\n")
	assert.Equal(t, int64(800), counter(p, "meshlimit.rule.tokens.settle_overrun"))
	_, ok = postJSON(t, p.VM(0), "alice", maxTokens(101))
	assert.False(t, ok, "900 of 1000 were charged")
}

// TestAnEventStreamSplitAtEveryByteIsSettledFromItsLastUsage: the upstream's stream arrives one byte
// at a time, with CRLF line ends, data lines without a space, comment lines, an event field and a
// [DONE] event, under a content type in upper case with parameters: it settles from its last usage
// (30 of 800 reserved: 770 refunded), and the filter copies each byte once (no re-scan per chunk).
func TestAnEventStreamSplitAtEveryByteIsSettledFromItsLastUsage(t *testing.T) {
	p := load(t, module(t, "meshlimit"), budgetConfig("", ""), 1)
	s, ok := postJSON(t, p.VM(0), "alice", maxTokens(800))
	require.True(t, ok)
	stream := ": keep-alive\r\nevent: delta\r\ndata:{\"text\": \"hi\"}\r\n\r\n" +
		"data:{\"usage\": {\"total_tokens\": 10}}\r\n\r\n" +
		": another comment\r\ndata:{\"usage\":\r\ndata: {\"total_tokens\": 30}}\r\n\r\ndata:[DONE]\r\n\r\n"
	_, err := s.SendResponseHeaders(envoyhost.Headers{{":status", "200"}, {"content-type", "Text/Event-Stream; charset=UTF-8"}}, false)
	require.NoError(t, err)
	for i := 0; i < len(stream); i++ {
		_, err = s.SendResponseBody([]byte{stream[i]}, i == len(stream)-1)
		require.NoError(t, err)
	}
	_, resp := s.BodyStats()
	require.NoError(t, s.Close())
	assert.Equal(t, int64(len(stream)), resp.CopiedBytes, "every byte copied once")
	assert.Equal(t, int64(1), counter(p, "meshlimit.rule.tokens.settled"))
	assert.Equal(t, int64(770), counter(p, "meshlimit.rule.tokens.settle_refund"))
}

// TestAnEventStreamEndedByTrailersSettlesFromItsLastEvent: an HTTP/2 stream whose body ends with
// trailers (and whose last event lacks its blank line) is whole: it settles, it is not kept.
func TestAnEventStreamEndedByTrailersSettlesFromItsLastEvent(t *testing.T) {
	p := load(t, module(t, "meshlimit"), budgetConfig("", ""), 1)
	s, ok := postJSON(t, p.VM(0), "alice", maxTokens(800))
	require.True(t, ok)
	_, err := s.SendResponseHeaders(envoyhost.Headers{{":status", "200"}, {"content-type", "text/event-stream"}}, false)
	require.NoError(t, err)
	_, err = s.SendResponseBody([]byte("data: {\"text\": \"hi\"}\n\ndata: {\"usage\": {\"total_tokens\": 50}}"), false)
	require.NoError(t, err)
	_, err = s.SendResponseTrailers(envoyhost.Headers{{"grpc-status", "0"}})
	require.NoError(t, err)
	require.NoError(t, s.Close())
	assert.Equal(t, int64(1), counter(p, "meshlimit.rule.tokens.settled"))
	assert.Equal(t, int64(750), counter(p, "meshlimit.rule.tokens.settle_refund"))
}

// TestARequestBodyOfOneByteChunksIsReadOnce: a client sends its body one byte per chunk. The filter
// holds it (StopIterationAndBuffer) and copies it once when it ends: the guest's work is linear in
// the body, never a re-read per chunk.
func TestARequestBodyOfOneByteChunksIsReadOnce(t *testing.T) {
	p := load(t, module(t, "meshlimit"), tokenCharge, 1)
	body := `{"model": "m", "pad": "` + strings.Repeat("x", 180) + `", "max_tokens": 1000}`
	s := p.VM(0).NewStream(envoyhost.StreamInfo{})
	_, err := s.SendRequestHeaders(envoyhost.Headers{{":method", "POST"}, {":path", "/v1/x"}, {":authority", "llm.test"}, {"x-user", "alice"}}, false)
	require.NoError(t, err)
	for i := 0; i < len(body); i++ {
		_, err = s.SendRequestBody([]byte{body[i]}, i == len(body)-1)
		require.NoError(t, err)
	}
	req, _ := s.BodyStats()
	assert.Equal(t, 1, req.Copies)
	assert.Equal(t, int64(len(body)), req.CopiedBytes)
	assert.Equal(t, []byte(body), s.UpstreamBody())
	require.NoError(t, s.Close())
	_, ok := postJSON(t, p.VM(0), "alice", maxTokens(1))
	assert.False(t, ok, "1000 were charged")
}

// TestTrailersWhileTheBodyStageCallIsOutKeepTheRequestBytesCounted: a global rule reads max_tokens
// from the body, a local rule charges the request's bytes. The client ends its body with trailers
// while the body-stage call is out: the bytes held are still the request's bytes (the trailers carry
// none), so the byte rule settles to them and refunds nothing.
func TestTrailersWhileTheBodyStageCallIsOutKeepTheRequestBytesCounted(t *testing.T) {
	clock := envoyhost.NewClock(epoch)
	svc := startService(t, clock)
	release := svc.hold() // the answer comes when the test says: after the chunks and trailers below
	defer release()
	cfg := globalBodyBudget("global", `, {"name": "up", "key": [{"header": "x-user"}], "limits": [{"rate": "100000/d"}],
		"cost": {"request_bytes": true, "max": 100000}}`)
	p := load(t, module(t, "meshlimit"), cfg, 1, withService(svc, nil), func(c *envoyhost.Config) { c.Clock = clock })
	body := `{"max_tokens": 300, "messages": "` + strings.Repeat("m", 500) + `"}`
	s := p.VM(0).NewStream(envoyhost.StreamInfo{})
	_, err := s.SendRequestHeaders(envoyhost.Headers{{":method", "POST"}, {":path", "/v1/x"}, {":authority", "llm.test"},
		{"x-user", "alice"}, {"content-length", strconv.Itoa(len(body))}}, false)
	require.NoError(t, err)
	act, err := s.SendRequestBody([]byte(body), false) // past max_body (256): the call goes out
	require.NoError(t, err)
	require.Equal(t, envoyhost.ActionPause, act)
	act, err = s.SendRequestTrailers(envoyhost.Headers{{"x-checksum", "1"}})
	require.NoError(t, err)
	assert.Equal(t, envoyhost.ActionPause, act, "the trailers wait with the body for the answer")
	release()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	act, err = s.Wait(ctx)
	require.NoError(t, err)
	require.Equal(t, envoyhost.ActionContinue, act)
	assert.Equal(t, []byte(body), s.UpstreamBody())
	settleAnswer(t, s, 200, "application/json", usageOf(300))
	assert.Zero(t, counter(p, "meshlimit.rule.up.settle_refund"), fmt.Sprintf("the %d bytes reserved were the bytes sent", len(body)))
	assert.Equal(t, int64(1), counter(p, "meshlimit.rule.up.settled"))
	assert.Zero(t, counter(p, "meshlimit.panics"))
}

// TestARuleChargingMaxTokensWithoutASettleLetsALaterRuleSettle: a rule whose cost is read from the
// body without a settle has nothing to settle. The stream's end once took it for a reservation and
// panicked on it, skipping the settle of the rules after it: a client could over-run a later rule's
// reservation and never be charged for it. Now the later rule's over-run is charged.
func TestARuleChargingMaxTokensWithoutASettleLetsALaterRuleSettle(t *testing.T) {
	cfg := `{"rules": [{"name": "charge", "key": [{"header": "x-user"}], "limits": [{"rate": "100000/d"}],
		"cost": {"request_json": "max_tokens", "default": 1, "max": 4000}},
		{"name": "tokens", "key": [{"header": "x-user"}], "limits": [{"rate": "1000/d"}],
		"cost": {"request_json": "max_tokens", "default": 500, "max": 4000, "settle": {"response_json": "usage.total_tokens"}}}]}`
	p := load(t, module(t, "meshlimit"), cfg, 1)
	s, ok := postJSON(t, p.VM(0), "alice", maxTokens(10))
	require.True(t, ok)
	settleAnswer(t, s, 200, "application/json", usageOf(990))
	assert.Equal(t, int64(980), counter(p, "meshlimit.rule.tokens.settle_overrun"))
	_, ok = postJSON(t, p.VM(0), "alice", maxTokens(11))
	assert.False(t, ok, "990 of 1000 were charged")
	assert.Zero(t, counter(p, "meshlimit.panics"))
}

// TestATinyMaxBodyNeverMakesTheFilterReadAnEventStreamByteByByte: max_body 40 bounds the event the
// filter keeps, not the pieces it reads: a chunk of 64 KiB from the upstream is read in pieces of
// 4 KiB (16 host calls, not 65536), and the stream still settles from its last usage.
func TestATinyMaxBodyNeverMakesTheFilterReadAnEventStreamByteByByte(t *testing.T) {
	cfg := `{"rules": [{"name": "tokens", "key": [{"header": "x-user"}], "limits": [{"rate": "1000/d"}],
		"cost": {"header": "x-max-tokens", "default": 800, "max_body": 40, "settle": {"response_json": "usage.total_tokens"}}}]}`
	p := load(t, module(t, "meshlimit"), cfg, 1)
	s := p.VM(0).NewStream(envoyhost.StreamInfo{})
	_, err := s.SendRequestHeaders(envoyhost.Headers{{":method", "GET"}, {":path", "/v1/x"}, {":authority", "llm.test"}, {"x-user", "alice"}}, true)
	require.NoError(t, err)
	pad := strings.Repeat("data: {\"t\": \"x\"}\n\n", (64<<10)/19)
	tail := "\n\ndata: {\"usage\":{\"total_tokens\":5}}"
	chunk := pad + strings.Repeat(":", 64<<10-len(pad)-len(tail)) + tail
	require.Equal(t, 64<<10, len(chunk))
	_, err = s.SendResponseHeaders(envoyhost.Headers{{":status", "200"}, {"content-type", "text/event-stream"}}, false)
	require.NoError(t, err)
	_, err = s.SendResponseBody([]byte(chunk), true)
	require.NoError(t, err)
	_, resp := s.BodyStats()
	require.NoError(t, s.Close())
	assert.Equal(t, 16, resp.Copies)
	assert.Equal(t, 4<<10, resp.MaxCopy)
	assert.Equal(t, int64(795), counter(p, "meshlimit.rule.tokens.settle_refund"))
}

// TestAGlobalRuleReadsTheBodyThatTrailersEnd: the same trailers, on a global rule: the call to the
// service goes out when the trailers come, with the reservation the held body names (900 of 1000),
// so the next request of 101 is denied.
func TestAGlobalRuleReadsTheBodyThatTrailersEnd(t *testing.T) {
	clock := envoyhost.NewClock(epoch)
	svc := startService(t, clock)
	p := load(t, module(t, "meshlimit"), globalBodyBudget("global", ""), 1, withService(svc, nil), func(c *envoyhost.Config) { c.Clock = clock })
	s := p.VM(0).NewStream(envoyhost.StreamInfo{})
	_, err := s.SendRequestHeaders(envoyhost.Headers{{":method", "POST"}, {":path", "/v1/x"}, {":authority", "llm.test"}, {"x-user", "alice"}}, false)
	require.NoError(t, err)
	_, err = s.SendRequestBody([]byte(maxTokens(900)), false)
	require.NoError(t, err)
	_, err = s.SendRequestTrailers(envoyhost.Headers{{"x-checksum", "1"}})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	act, err := s.Wait(ctx)
	require.NoError(t, err)
	require.Equal(t, envoyhost.ActionContinue, act)
	assert.Equal(t, maxTokens(900), string(s.UpstreamBody()))
	require.NoError(t, s.Close()) // no answer: the reservation is kept
	_, ok := postJSON(t, p.VM(0), "alice", maxTokens(101))
	assert.False(t, ok, "900 were reserved")
	assert.Zero(t, counter(p, "meshlimit.rule.tokens.bad_body"))
}

// TestAClientAskingForACompressedAnswerCannotHideItsUsage: a client that sends accept-encoding: gzip
// (most HTTP clients do by default) would get a compressed answer the filter cannot read: no usage,
// the reservation kept, an over-run never charged. So a request whose reservation settles from the
// response's JSON asks the upstream for identity, whatever the rule's scope and wherever its
// reservation comes from; a request of a rule that does not read the answer keeps its header.
func TestAClientAskingForACompressedAnswerCannotHideItsUsage(t *testing.T) {
	clock := envoyhost.NewClock(epoch)
	svc := startService(t, clock)
	const other = `{"name": "plain", "key": [{"header": "x-user"}], "limits": [{"rate": "1000/d"}]}`
	for _, tc := range []struct {
		name, config, want string
		overrun            int64 // 690 per reservation: the usage (700) was read
	}{
		{"a local rule reserving from the body", budgetConfig("", ""), "identity", 690},
		{"a global rule reserving from a header", globalBudget(""), "identity", 690},
		{"a global rule reserving from the body", globalBodyBudget("global", ""), "identity", 690},
		{"a rule of both scopes reserving from the body", globalBodyBudget("both", ""), "identity", 2 * 690},
		{"a rule that does not read the answer", `{"rules": [` + other + `]}`, "gzip, br", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := load(t, module(t, "meshlimit"), tc.config, 1, withService(svc, nil), func(c *envoyhost.Config) { c.Clock = clock })
			s := p.VM(0).NewStream(envoyhost.StreamInfo{})
			body := maxTokens(10)
			_, err := s.SendRequestHeaders(envoyhost.Headers{{":method", "POST"}, {":path", "/v1/x"}, {":authority", "llm.test"},
				{"x-user", "u-" + strconv.Itoa(len(tc.name))}, {"x-max-tokens", "10"}, {"accept-encoding", "gzip, br"}}, false)
			require.NoError(t, err)
			_, err = s.SendRequestBody([]byte(body), true)
			require.NoError(t, err)
			ctx, cancel := context.WithTimeout(context.Background(), patience)
			defer cancel()
			act, err := s.Wait(ctx)
			require.NoError(t, err)
			require.Equal(t, envoyhost.ActionContinue, act)
			got, _ := s.UpstreamHeaders().Get("accept-encoding")
			assert.Equal(t, tc.want, got)
			settleAnswer(t, s, 200, "application/json", usageOf(700))
			assert.Equal(t, tc.overrun, counter(p, "meshlimit.rule.tokens.settle_overrun"))
		})
	}
}

// TestABothScopesClientLeavingAnEventStreamEarlyKeepsBothReservations: a rule of both scopes
// reserves 800 locally and at the service (on_missing "reservation": with the default, max is
// charged, see TestAClientWhoseAnswerCarriesNoUsageIsChargedMaxNotItsReservation). The client leaves the stream after an early usage event
// (5): neither half is refunded, so neither this proxy nor another one (its own shared data, the
// same service) admits 201 more.
func TestABothScopesClientLeavingAnEventStreamEarlyKeepsBothReservations(t *testing.T) {
	clock := envoyhost.NewClock(epoch)
	svc := startService(t, clock)
	onClock := func(c *envoyhost.Config) { c.Clock = clock }
	a := load(t, module(t, "meshlimit"), keepOnMissing(globalBodyBudget("both", "")), 1, withService(svc, nil), onClock)
	b := load(t, module(t, "meshlimit"), keepOnMissing(globalBodyBudget("both", "")), 1, withService(svc, nil), onClock)
	s, ok := postJSON(t, a.VM(0), "alice", maxTokens(800))
	require.True(t, ok)
	cutAnswer(t, s, "text/event-stream", "data: {\"usage\": {\"total_tokens\": 5}}\n\n")
	assert.Equal(t, int64(2), counter(a, "meshlimit.rule.tokens.settle_kept"), "the local and the global halves")
	assert.Zero(t, counter(a, "meshlimit.rule.tokens.settle_refund"))
	for i, p := range []*envoyhost.Plugin{a, b} {
		_, ok = postJSON(t, p.VM(0), "alice", maxTokens(201))
		assert.False(t, ok, "proxy %d: 800 stay reserved", i)
	}
	_, ok = postJSON(t, b.VM(0), "alice", maxTokens(200))
	assert.True(t, ok, "the other proxy's local half is its own: 200 fit both")
}

// TestAClientWhoseBodyNeverEndsIsStillCountedByTheGlobalRulesThatReadNoBody: a global rule of 3
// requests per minute per user, and a global token budget reserved from the body. A client sends
// headers and a body it never finishes, again and again, to hold upstream requests open. The rule
// that reads no body decides each request with its headers: the fourth is answered 429 at once and
// never reaches the upstream; the three stalled ones are charged the body rule's default when they
// end.
func TestAClientWhoseBodyNeverEndsIsStillCountedByTheGlobalRulesThatReadNoBody(t *testing.T) {
	redis := redistest.Start(t)
	svc := startSettleService(t, redis.Addr())
	cfg := globalBodyBudget("global", `, {"name": "per-user", "scope": "global", "key": [{"header": "x-user"}], "limits": [{"rate": "3/m"}]}`)
	p := load(t, module(t, "meshlimit"), cfg, 1, toReplica(svc.addr))
	var stalled []*envoyhost.Stream
	for i := range 3 {
		s, ok := openHeaders(t, p.VM(0), "mallory")
		require.True(t, ok, "request %d: within 3/m", i)
		assert.NotNil(t, s.UpstreamHeaders(), "request %d: the headers went upstream", i)
		act, err := s.SendRequestBody([]byte(`{"max_tokens": `), false)
		require.NoError(t, err)
		assert.Equal(t, envoyhost.ActionPause, act, "request %d: the body is held, never ended", i)
		stalled = append(stalled, s)
	}
	s, ok := openHeaders(t, p.VM(0), "mallory")
	assert.False(t, ok, "the fourth request is denied with its headers")
	require.NotNil(t, s.LocalReply())
	assert.Equal(t, 429, s.LocalReply().Status)
	assert.Nil(t, s.UpstreamHeaders(), "and never reaches the upstream")
	assert.Equal(t, "per-user", s.FilterState()["wasm.meshlimit.rule"])
	require.NoError(t, s.Close())
	assert.Equal(t, int64(1), counter(p, "meshlimit.rule.per-user.limited"))
	assert.Equal(t, int64(4), counter(p, "meshlimit.global.calls"), "one call per request, with its headers; none with a body")
	for _, s := range stalled {
		require.NoError(t, s.Close())
	}
	svc.waitSettles(t, 3)
	assert.Equal(t, int64(3), counter(p, "meshlimit.rule.tokens.settle_kept"), "each stalled request is charged the body rule's default")
	assert.Zero(t, counter(p, "meshlimit.panics"))
}
