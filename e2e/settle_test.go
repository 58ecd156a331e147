package e2e

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/internal/envoyhost"
)

// tokenBudget is a budget of 1000 tokens per user per day (no meaningful refill during a test),
// reserved from max_tokens (default 500, at most 4000) and settled from usage.total_tokens.
const tokenBudget = `{"rules": [{"name": "tokens", "key": [{"header": "x-user"}],
	"limits": [{"rate": "1000/d"}],
	"cost": {"request_json": "max_tokens", "default": 500, "max": 4000, "max_body": 256%s,
		"settle": {"response_json": "usage.total_tokens"%s}}}]}`

func budgetConfig(extra, settleExtra string) string {
	return fmt.Sprintf(tokenBudget, extra, settleExtra)
}

// post opens a stream for user with a JSON body sent in one chunk and reports whether it was
// admitted (forwarded upstream).
func postJSON(t *testing.T, vm *envoyhost.VM, user, body string) (*envoyhost.Stream, bool) {
	t.Helper()
	s := vm.NewStream(envoyhost.StreamInfo{SourceAddress: "10.0.0.1:40000"})
	h := envoyhost.Headers{{":method", "POST"}, {":path", "/v1/chat/completions"}, {":authority", "llm.test"},
		{":scheme", "http"}, {"x-user", user}, {"content-type", "application/json"}, {"content-length", strconv.Itoa(len(body))}}
	_, err := s.SendRequestHeaders(h, body == "")
	require.NoError(t, err)
	if body != "" {
		_, err = s.SendRequestBody([]byte(body), true)
		require.NoError(t, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	act, err := s.Wait(ctx)
	require.NoError(t, err)
	if act != envoyhost.ActionContinue {
		require.NotNil(t, s.LocalReply())
		assert.Equal(t, 429, s.LocalReply().Status)
		require.NoError(t, s.Close())
		return nil, false
	}
	return s, true
}

// answer sends the upstream's response in chunks and ends the stream.
func settleAnswer(t *testing.T, s *envoyhost.Stream, status int, contentType string, chunks ...string) {
	t.Helper()
	h := envoyhost.Headers{{":status", strconv.Itoa(status)}, {"content-type", contentType}}
	_, err := s.SendResponseHeaders(h, len(chunks) == 0)
	require.NoError(t, err)
	for i, c := range chunks {
		_, err = s.SendResponseBody([]byte(c), i == len(chunks)-1)
		require.NoError(t, err)
	}
	require.NoError(t, s.Close())
}

// cutAnswer sends the upstream's 200 of contentType and the start of its body, then the client goes
// away before the body ends.
func cutAnswer(t *testing.T, s *envoyhost.Stream, contentType, start string) {
	t.Helper()
	_, err := s.SendResponseHeaders(envoyhost.Headers{{":status", "200"}, {"content-type", contentType}}, false)
	require.NoError(t, err)
	_, err = s.SendResponseBody([]byte(start), false)
	require.NoError(t, err)
	require.NoError(t, s.Close())
}

func usageOf(n int) string {
	return fmt.Sprintf(`{"id": "c1", "usage": {"prompt_tokens": 1, "total_tokens": %d}}`, n)
}

func maxTokens(n int) string { return fmt.Sprintf(`{"model": "m", "max_tokens": %d}`, n) }

// openReserving opens n streams of user at once through vms, each with the body maxTokens(reserve),
// and returns those admitted, still open.
func openReserving(t *testing.T, vms []*envoyhost.VM, user string, n, reserve int) []*envoyhost.Stream {
	return openTogether(vms, n, func(vm *envoyhost.VM) (*envoyhost.Stream, bool) {
		return postJSON(t, vm, user, maxTokens(reserve))
	})
}

// openTogether opens n streams at once, n/len(vms) through each of vms (the workers decide at the
// same time, through shared data), each by open, and returns those admitted, still open.
func openTogether(vms []*envoyhost.VM, n int, open func(*envoyhost.VM) (*envoyhost.Stream, bool)) []*envoyhost.Stream {
	var mu sync.Mutex
	var admitted []*envoyhost.Stream
	var wg sync.WaitGroup
	for _, vm := range vms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range n / len(vms) {
				if s, ok := open(vm); ok {
					mu.Lock()
					admitted = append(admitted, s)
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	return admitted
}

// vmsOf lists the VMs of every one of proxies.
func vmsOf(proxies []*envoyhost.Plugin) []*envoyhost.VM {
	var vms []*envoyhost.VM
	for _, p := range proxies {
		vms = append(vms, p.VMs()...)
	}
	return vms
}

// TestConcurrentRequestsOvershootTheBudgetByNoMoreThanTheyUseBeyondTheirReservations: 30 requests
// in flight together on two workers each reserve 100 of a budget of 1000: exactly 10 are admitted
// (admission never overshoots). They settle at 30 each: 700 come back, and exactly 7 more fit. When
// requests use more than they reserved (150 for 100), the budget is overshot by exactly the sum of
// the over-runs, which is charged: the key is in debt and denied.
func TestConcurrentRequestsOvershootTheBudgetByNoMoreThanTheyUseBeyondTheirReservations(t *testing.T) {
	p := load(t, module(t, "meshlimit"), budgetConfig("", ""), 2)
	open := openReserving(t, p.VMs(), "alice", 30, 100)
	require.Len(t, open, 10, "reservations admitted together never exceed the budget")
	for _, s := range open {
		settleAnswer(t, s, 200, "application/json", usageOf(30))
	}
	assert.Equal(t, int64(10), counter(p, "meshlimit.rule.tokens.settled"))
	assert.Equal(t, int64(700), counter(p, "meshlimit.rule.tokens.settle_refund"))
	open = openReserving(t, p.VMs(), "alice", 30, 100)
	require.Len(t, open, 7, "the 700 refunded fit 7 more reservations of 100")
	for _, s := range open {
		settleAnswer(t, s, 200, "application/json", usageOf(150)) // each over-runs by 50
	}
	assert.Equal(t, int64(350), counter(p, "meshlimit.rule.tokens.settle_overrun"))
	_, ok := postJSON(t, p.VM(0), "alice", maxTokens(1))
	assert.False(t, ok, "1300 + 350 used of 1000: the key is in debt")
	s, ok := postJSON(t, p.VM(1), "bob", maxTokens(1000))
	require.True(t, ok, "another key has its own budget")
	settleAnswer(t, s, 200, "application/json", usageOf(1000))
}

// TestAnEventStreamIsSettledFromItsLastEventThatCarriesUsage: the usage of a streamed completion
// comes in its last data event, split across chunks; the reservation of 100 settles at 250.
func TestAnEventStreamIsSettledFromItsLastEventThatCarriesUsage(t *testing.T) {
	p := load(t, module(t, "meshlimit"), budgetConfig("", ""), 1)
	s, ok := postJSON(t, p.VM(0), "alice", maxTokens(100))
	require.True(t, ok)
	var chunks []string
	for i := range 20 {
		chunks = append(chunks, fmt.Sprintf("data: {\"choices\": [{\"delta\": {\"content\": \"w%d\"}}], \"usage\": null}\n\n", i))
	}
	last := "data: {\"choices\": [], \"usage\": {\"prompt_tokens\": 50, \"total_tokens\": 250}}\n\ndata: [DONE]\n\n"
	chunks = append(chunks, last[:17], last[17:40], last[40:])
	settleAnswer(t, s, 200, "text/event-stream; charset=utf-8", chunks...)
	rl, _ := s.DownstreamHeaders().Get("ratelimit")
	assert.Contains(t, rl, `"tokens";r=900;`, "the quota after the reservation of 100, as the response began")
	assert.Equal(t, int64(1), counter(p, "meshlimit.rule.tokens.settled"))
	assert.Equal(t, int64(150), counter(p, "meshlimit.rule.tokens.settle_overrun"))
	s, ok = postJSON(t, p.VM(0), "alice", maxTokens(750))
	require.True(t, ok, "250 used: 750 remain")
	settleAnswer(t, s, 200, "application/json", usageOf(750))
	_, ok = postJSON(t, p.VM(0), "alice", maxTokens(1))
	assert.False(t, ok)
}

// TestA5xxRefundsTheReservationUnlessOnErrorKeepsIt.
func TestA5xxRefundsTheReservationUnlessOnErrorKeepsIt(t *testing.T) {
	for _, tt := range []struct {
		name, settleExtra string
		nextFits          bool
	}{
		{"a 503 refunds the whole reservation by default", "", true},
		{"on_error keep keeps it", `, "on_error": "keep"`, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := load(t, module(t, "meshlimit"), budgetConfig("", tt.settleExtra), 1)
			s, ok := postJSON(t, p.VM(0), "alice", maxTokens(600))
			require.True(t, ok)
			settleAnswer(t, s, 503, "application/json", usageOf(600)) // an error's usage is not charged
			s, ok = postJSON(t, p.VM(0), "alice", maxTokens(1000))
			assert.Equal(t, tt.nextFits, ok)
			if ok {
				settleAnswer(t, s, 200, "application/json", usageOf(1))
			}
		})
	}
}

// TestBadBodiesReserveTheDefaultAndAreCountedNeverATrap: a malformed body, max_tokens 0, a string,
// a body past max_body: each reserves the default (500), is counted, and the filter keeps working.
// A response without usage, or a cut one, keeps the reservation (counted).
func TestBadBodiesReserveTheDefaultAndAreCountedNeverATrap(t *testing.T) {
	bad := []string{`{"max_tokens": 3`, `{"max_tokens": 0}`, `{"max_tokens": "9"}`, `{"max_tokens": 1, "pad": "` + strings.Repeat("x", 300) + `"}`, `[]`}
	for i, body := range bad {
		t.Run(fmt.Sprintf("body %d", i), func(t *testing.T) {
			p := load(t, module(t, "meshlimit"), budgetConfig("", `, "on_missing": "reservation"`), 1)
			s, ok := postJSON(t, p.VM(0), "alice", body)
			require.True(t, ok)
			settleAnswer(t, s, 200, "application/json", `{"id": "no usage here"}`)
			assert.Equal(t, int64(1), counter(p, "meshlimit.rule.tokens.bad_body"))
			assert.Equal(t, int64(1), counter(p, "meshlimit.rule.tokens.settle_kept"), "no usage: the reservation stays")
			s, ok = postJSON(t, p.VM(0), "alice", maxTokens(500))
			require.True(t, ok, "500 of 1000 were reserved: 500 remain")
			settleAnswer(t, s, 200, "application/json", `{"usage": {"total_tokens": 500`) // cut: not JSON
			_, ok = postJSON(t, p.VM(0), "alice", maxTokens(1))
			assert.False(t, ok, "the cut answer kept its reservation")
			assert.Equal(t, int64(2), counter(p, "meshlimit.rule.tokens.settle_kept"))
			assert.Zero(t, counter(p, "meshlimit.panics"))
		})
	}
}

// TestARequestWhoseBodyNeverEndsIsChargedItsDefaultWhenTheStreamEnds: the body is held (at most
// max_body), the client goes away: the default is charged.
func TestARequestWhoseBodyNeverEndsIsChargedItsDefaultWhenTheStreamEnds(t *testing.T) {
	p := load(t, module(t, "meshlimit"), budgetConfig("", ""), 1)
	s := p.VM(0).NewStream(envoyhost.StreamInfo{})
	h := envoyhost.Headers{{":method", "POST"}, {":path", "/v1/x"}, {":authority", "llm.test"}, {"x-user", "alice"}}
	_, err := s.SendRequestHeaders(h, false)
	require.NoError(t, err)
	act, err := s.SendRequestBody([]byte(`{"max_tokens": `), false)
	require.NoError(t, err)
	assert.Equal(t, envoyhost.ActionPause, act, "the body is held until it ends")
	require.NoError(t, s.Close())
	s2, ok := postJSON(t, p.VM(0), "alice", maxTokens(500))
	require.True(t, ok)
	settleAnswer(t, s2, 200, "application/json", usageOf(500))
	_, ok = postJSON(t, p.VM(0), "alice", maxTokens(1))
	assert.False(t, ok, "the abandoned request was charged 500")
}

// TestAResponseThatIsNeverReadToTheEndKeepsItsReservation: the client stops reading (the stream is
// reset before the response ends): no usage was seen, the reservation stays.
func TestAResponseThatIsNeverReadToTheEndKeepsItsReservation(t *testing.T) {
	p := load(t, module(t, "meshlimit"), budgetConfig("", ""), 1)
	s, ok := postJSON(t, p.VM(0), "alice", maxTokens(800))
	require.True(t, ok)
	cutAnswer(t, s, "application/json", `{"usage": {"total_tokens": 5}`)
	assert.Equal(t, int64(1), counter(p, "meshlimit.rule.tokens.settle_kept"))
	_, ok = postJSON(t, p.VM(0), "alice", maxTokens(201))
	assert.False(t, ok, "800 stay reserved")
}

const byteBudget = `{"rules": [{"name": "bytes", "key": [{"header": "x-user"}], "limits": [{"rate": "1000/d"}],
	"cost": {"request_bytes": true, "max": 100000}},
	{"name": "down", "key": [{"header": "x-user"}], "limits": [{"rate": "1000/d", "name": "down"}],
	"cost": {"settle": {"body_bytes": "response"}, "default": 1}}]}`

// TestByteLimitsChargeTheBodyBytesThatPassed: the request body bytes (reserved from content-length,
// settled to what came, so a lying content-length gains nothing) and the response body bytes.
func TestByteLimitsChargeTheBodyBytesThatPassed(t *testing.T) {
	p := load(t, module(t, "meshlimit"), byteBudget, 1)
	body := strings.Repeat("a", 600)
	s, ok := postJSON(t, p.VM(0), "alice", body)
	require.True(t, ok)
	settleAnswer(t, s, 200, "text/plain", "ok")
	policy, _ := s.DownstreamHeaders().Get("ratelimit-policy")
	assert.Contains(t, policy, `"bytes";q=1000;w=86400;qu="content-bytes"`)
	_, ok = postJSON(t, p.VM(0), "alice", body)
	assert.False(t, ok, "600 + 600 bytes of a 1000-byte budget")

	lie := p.VM(0).NewStream(envoyhost.StreamInfo{})
	h := envoyhost.Headers{{":method", "POST"}, {":path", "/"}, {":authority", "a.test"}, {"x-user", "bob"}, {"content-length", "10"}}
	_, err := lie.SendRequestHeaders(h, false)
	require.NoError(t, err)
	_, err = lie.SendRequestBody([]byte(strings.Repeat("b", 900)), true)
	require.NoError(t, err)
	settleAnswer(t, lie, 200, "text/plain", strings.Repeat("r", 700))
	assert.Equal(t, int64(890), counter(p, "meshlimit.rule.bytes.settle_overrun"), "content-length said 10, 900 came")
	_, ok = postJSON(t, p.VM(0), "bob", strings.Repeat("c", 101))
	assert.False(t, ok, "bob's 900 bytes were charged despite the content-length of 10")
	assert.Equal(t, int64(1+699), counter(p, "meshlimit.rule.down.settle_overrun"), "2 and 700 response bytes for reservations of 1")
	assert.Zero(t, counter(p, "meshlimit.panics"), "a cost settled at its reservation (alice's 600 bytes) increments no counter by 0")
}

// TestARequestDeniedByALaterRuleRefundsWhatEarlierRulesReserved: the request never reached the
// upstream, so it used nothing. Also: a cost settled from a response header.
func TestARequestDeniedByALaterRuleRefundsWhatEarlierRulesReserved(t *testing.T) {
	cfg := `{"rules": [
		{"name": "tokens", "key": [{"header": "x-user"}], "limits": [{"rate": "1000/d"}],
		 "cost": {"default": 600, "settle": {"response_header": "x-tokens-used"}}},
		{"name": "second", "match": {"headers": [{"name": "x-second", "present": true}]}, "key": [{"header": "x-user"}],
		 "limits": [{"rate": "1/d", "name": "second"}]}]}`
	p := load(t, module(t, "meshlimit"), cfg, 1)
	send := func(second bool) (*envoyhost.Stream, bool) {
		s := p.VM(0).NewStream(envoyhost.StreamInfo{})
		h := envoyhost.Headers{{":method", "GET"}, {":path", "/"}, {":authority", "a.test"}, {"x-user", "alice"}}
		if second {
			h = append(h, [2]string{"x-second", "1"})
		}
		act, err := s.SendRequestHeaders(h, true)
		require.NoError(t, err)
		if act != envoyhost.ActionContinue {
			require.NoError(t, s.Close())
			return nil, false
		}
		return s, true
	}
	s, ok := send(true)
	require.True(t, ok)
	_, err := s.SendResponseHeaders(envoyhost.Headers{{":status", "200"}, {"x-tokens-used", "100"}}, true)
	require.NoError(t, err)
	require.NoError(t, s.Close())
	assert.Equal(t, int64(500), counter(p, "meshlimit.rule.tokens.settle_refund"), "600 reserved, 100 used")

	_, ok = send(true)
	require.False(t, ok, "the second rule denies; the 600 the first reserved come back")
	s, ok = send(false)
	require.True(t, ok, "100 used of 1000: a reservation of 600 fits")
	require.NoError(t, s.Close()) // no response: the reservation is kept
	_, ok = send(false)
	assert.False(t, ok, "700 used: 600 more do not fit")
}

// TestARequestTheGlobalServiceDeniesRefundsWhatLocalRulesReserved: the local reservation is taken
// before the service answers; the service's denial gives it back.
func TestARequestTheGlobalServiceDeniesRefundsWhatLocalRulesReserved(t *testing.T) {
	clock := envoyhost.NewClock(epoch)
	svc := startService(t, clock)
	cfg := globalConfig(`{"name": "tokens", "key": [{"header": "x-user"}], "limits": [{"rate": "1000/d"}],
		 "cost": {"default": 600, "settle": {"response_header": "x-tokens-used"}}},
		{"name": "second", "scope": "global", "match": {"headers": [{"name": "x-second", "present": true}]},
		 "key": [{"header": "x-user"}], "limits": [{"rate": "1/d", "name": "second"}]}`)
	p := load(t, module(t, "meshlimit"), cfg, 1, withService(svc, nil), func(c *envoyhost.Config) { c.Clock = clock })
	send := func(second bool) envoyhost.Result {
		r := get("a.test", "/", "192.0.2.9", [2]string{"x-user", "alice"})
		if second {
			r.Headers = append(r.Headers, [2]string{"x-second", "1"})
		}
		ctx, cancel := context.WithTimeout(context.Background(), patience)
		defer cancel()
		res, err := p.VM(0).RoundTrip(ctx, r, &envoyhost.Response{Headers: envoyhost.Headers{{":status", "200"}, {"x-tokens-used", "100"}}})
		require.NoError(t, err)
		return res
	}
	require.Nil(t, send(true).LocalReply, "600 reserved, settled at 100")
	denied := send(true)
	require.NotNil(t, denied.LocalReply, "the service denies the second")
	require.Nil(t, send(false).LocalReply, "100 + 600 fit: the denied request's 600 came back (700 + 600 would not)")
	assert.Equal(t, int64(2), counter(p, "meshlimit.rule.tokens.settled"))
}

// TestAResponseLargerThanMaxBodyKeepsItsReservationAndPassesWhole: the filter copies at most
// max_body bytes of a JSON response; a larger one is not read for usage (counted as kept) and
// reaches the client untouched.
func TestAResponseLargerThanMaxBodyKeepsItsReservationAndPassesWhole(t *testing.T) {
	p := load(t, module(t, "meshlimit"), budgetConfig("", ""), 1)
	s, ok := postJSON(t, p.VM(0), "alice", maxTokens(400))
	require.True(t, ok)
	big := `{"pad": "` + strings.Repeat("p", 300) + `", "usage": {"total_tokens": 5}}`
	settleAnswer(t, s, 200, "application/json", big[:100], big[100:])
	assert.Equal(t, []byte(big), s.DownstreamBody())
	assert.Equal(t, int64(1), counter(p, "meshlimit.rule.tokens.settle_kept"))
	_, ok = postJSON(t, p.VM(0), "alice", maxTokens(601))
	assert.False(t, ok, "400 stay reserved")
}

// TestABodyReservationWaitsForTheGlobalServiceFirst: the request pauses for the service's answer
// while its body arrives; the body is delivered after the resume and the reservation is decided then.
func TestABodyReservationWaitsForTheGlobalServiceFirst(t *testing.T) {
	clock := envoyhost.NewClock(epoch)
	svc := startService(t, clock)
	cfg := globalConfig(`{"name": "tokens", "key": [{"header": "x-user"}], "limits": [{"rate": "1000/d"}],
		 "cost": {"request_json": "max_tokens", "default": 500, "settle": {"response_json": "usage.total_tokens"}}},
		{"name": "calls", "scope": "global", "key": [{"header": "x-user"}], "limits": [{"rate": "100/d", "name": "calls"}]}`)
	p := load(t, module(t, "meshlimit"), cfg, 1, withService(svc, nil), func(c *envoyhost.Config) { c.Clock = clock })
	for i, want := range []bool{true, true, false} {
		s, ok := postJSON(t, p.VM(0), "alice", maxTokens(400))
		require.Equal(t, want, ok, "request %d", i)
		if ok {
			settleAnswer(t, s, 200, "application/json", usageOf(400))
		}
	}
	assert.Equal(t, int64(2), counter(p, "meshlimit.rule.tokens.settled"))
	// The third request is admitted by the service's "calls" and denied by the local budget at the
	// body stage: "calls" gets its unit back in one undo call of its own.
	assert.Equal(t, int64(1), counter(p, "meshlimit.global.give_back_calls"))
	eventually(t, "the give-back reached the service", func() bool { return svc.calls.Load() >= 3+1 })
	assert.Equal(t, int64(3+1), svc.calls.Load(), "each request asked the service first, and the denied one gave back")
}

// TestALocalClientThatSendsMaxTokensTwiceReservesTheHigher: as a global rule does (and a repeated
// cost header), the higher of two max_tokens is the reservation, whichever comes first.
func TestALocalClientThatSendsMaxTokensTwiceReservesTheHigher(t *testing.T) {
	p := load(t, module(t, "meshlimit"), budgetConfig("", ""), 1)
	s, ok := postJSON(t, p.VM(0), "alice", `{"max_tokens": 900, "max_tokens": 1}`)
	require.True(t, ok)
	_, ok = postJSON(t, p.VM(0), "alice", maxTokens(101))
	assert.False(t, ok, "900 are reserved, not 1")
	settleAnswer(t, s, 200, "application/json", usageOf(900))
	assert.Zero(t, counter(p, "meshlimit.rule.tokens.bad_body"))
}

// TestABodyStageDenialNamesItsOwnKeyWhenAnotherStreamCameBetween: a denial decided when the body
// arrives hashes the denied request's key into the filter state, not the key of whichever stream's
// headers the worker decided last.
func TestABodyStageDenialNamesItsOwnKeyWhenAnotherStreamCameBetween(t *testing.T) {
	p := load(t, module(t, "meshlimit"), budgetConfig("", ""), 1)
	s, ok := postJSON(t, p.VM(0), "alice", maxTokens(1000))
	require.True(t, ok)
	settleAnswer(t, s, 200, "application/json", usageOf(1000))
	deny := func(between bool) string {
		a := p.VM(0).NewStream(envoyhost.StreamInfo{})
		_, err := a.SendRequestHeaders(envoyhost.Headers{{":method", "POST"}, {":path", "/v1/x"}, {":authority", "llm.test"}, {"x-user", "alice"}}, false)
		require.NoError(t, err)
		if between {
			b := p.VM(0).NewStream(envoyhost.StreamInfo{})
			_, err := b.SendRequestHeaders(envoyhost.Headers{{":method", "POST"}, {":path", "/v1/x"}, {":authority", "llm.test"}, {"x-user", "bob"}}, false)
			require.NoError(t, err)
			defer func() { require.NoError(t, b.Close()) }()
		}
		_, err = a.SendRequestBody([]byte(maxTokens(1)), true)
		require.NoError(t, err)
		require.NotNil(t, a.LocalReply(), "alice's budget is spent")
		hash := a.FilterState()["wasm.meshlimit.key_hash"]
		require.NoError(t, a.Close())
		return hash
	}
	alone := deny(false)
	require.Len(t, alone, 16)
	assert.Equal(t, alone, deny(true), "bob's headers came between alice's headers and body")
}

// TestARequestBodyEndedByTrailersIsDecidedFromTheHeldBodyAndPassesWithThem: trailers end a body that
// never said end_of_stream (gRPC, HTTP/2 with trailers). Envoy calls the filter that holds the body
// with the trailers; the rule decides from the held body, and the held body passes upstream before
// the trailers. Without that the request would hang until the client gave up.
func TestARequestBodyEndedByTrailersIsDecidedFromTheHeldBodyAndPassesWithThem(t *testing.T) {
	p := load(t, module(t, "meshlimit"), budgetConfig("", ""), 1)
	s := p.VM(0).NewStream(envoyhost.StreamInfo{})
	h := envoyhost.Headers{{":method", "POST"}, {":path", "/v1/x"}, {":authority", "llm.test"}, {"x-user", "alice"}}
	_, err := s.SendRequestHeaders(h, false)
	require.NoError(t, err)
	act, err := s.SendRequestBody([]byte(maxTokens(100)), false)
	require.NoError(t, err)
	assert.Equal(t, envoyhost.ActionPause, act, "the body is held until it ends")
	act, err = s.SendRequestTrailers(envoyhost.Headers{{"x-checksum", "1"}})
	require.NoError(t, err)
	assert.Equal(t, envoyhost.ActionContinue, act, "the trailers end the body: the rule decides")
	assert.Equal(t, maxTokens(100), string(s.UpstreamBody()), "the held body went upstream")
	settleAnswer(t, s, 200, "application/json", usageOf(600))
	_, ok := postJSON(t, p.VM(0), "alice", maxTokens(401))
	assert.False(t, ok, "the request was charged its usage (600 of 1000): 401 more do not fit")
	s2, ok := postJSON(t, p.VM(0), "alice", maxTokens(400))
	require.True(t, ok, "400 more fit")
	settleAnswer(t, s2, 200, "application/json", usageOf(400))
}
