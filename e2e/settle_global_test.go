package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/internal/envoyhost"
	"github.com/meshlimit/meshlimit/internal/redistest"
	"github.com/meshlimit/meshlimit/service"
	"github.com/meshlimit/meshlimit/service/redisstore"
)

// settleService is a replica of the decision service on a real Redis that counts the settle calls it
// has applied (the filter never waits for them: a test waits here).
type settleService struct {
	addr    string
	settles atomic.Int64
}

func startSettleService(t *testing.T, redisAddr string) *settleService {
	t.Helper()
	return startSettleServiceAt(t, redisAddr, settleServiceTime)
}

// settleServiceTime is the time of the settle service, frozen: half a minute into a minute (an
// hour, a day) of the calendar, so that no window of a test's limits begins or ends while it runs
// and no bucket refills however slowly it runs. (On Redis TIME, an admission within the filter's
// undo margin, global.timeout = 200ms, after a minute began was not given back by a fixed window
// or a sliding window counter of a minute, as designed: the fixed_window and sliding_window
// subtests of TestARequestDeniedAfterAGlobalRuleAdmittedItSpendsNothingOfTheGlobalQuota failed
// whenever a run came 0-200 ms after a minute's start, and always at 100 ms after it.)
var settleServiceTime = epoch.Add(30 * time.Second)

// startSettleServiceAt starts a settle service whose store decides at now, frozen.
func startSettleServiceAt(t *testing.T, redisAddr string, now time.Time) *settleService {
	t.Helper()
	rs, err := redisstore.New(redisstore.Config{Addrs: []string{redisAddr}, DialTimeout: testDialTimeout})
	require.NoError(t, err)
	t.Cleanup(func() { _ = rs.Close() })
	store := onClock(rs, func() time.Time { return now })
	h, err := service.NewHandler(service.Config{Store: store, Timeout: time.Second})
	require.NoError(t, err)
	s := &settleService{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		h.ServeHTTP(w, r)
		if bytes.HasPrefix(body, []byte(`{"settle":`)) {
			s.settles.Add(1)
		}
	}))
	t.Cleanup(srv.Close)
	s.addr = strings.TrimPrefix(srv.URL, "http://")
	return s
}

// waitSettles waits until the service has applied n settle calls in all.
func (s *settleService) waitSettles(t *testing.T, n int64) {
	t.Helper()
	eventually(t, strconv.FormatInt(n, 10)+" settles applied", func() bool { return s.settles.Load() >= n })
}

// globalBudget is a global budget of 1000 tokens per user per day, reserved from the x-max-tokens
// header (default 500) and settled from usage.total_tokens.
func globalBudget(extra string) string {
	return globalConfig(`{"name": "tokens", "scope": "global", "key": [{"header": "x-user"}], "limits": [{"rate": "1000/d"}],
		"cost": {"header": "x-max-tokens", "default": 500, "settle": {"response_json": "usage.total_tokens"}}}` + extra)
}

// openGlobalReserving opens a stream of user reserving reserve and reports whether it was admitted.
func openGlobalReserving(t *testing.T, vm *envoyhost.VM, user string, reserve int, extra ...[2]string) (*envoyhost.Stream, bool) {
	t.Helper()
	s := vm.NewStream(envoyhost.StreamInfo{SourceAddress: "10.0.0.1:40000"})
	h := envoyhost.Headers{{":method", "POST"}, {":path", "/v1/chat/completions"}, {":authority", "llm.test"},
		{":scheme", "http"}, {"x-user", user}, {"x-max-tokens", strconv.Itoa(reserve)}}
	_, err := s.SendRequestHeaders(append(h, extra...), true)
	require.NoError(t, err)
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

// openGlobalReservingTogether opens n streams of user at once through every VM of the proxies, each
// reserving reserve, and returns those admitted, still open.
func openGlobalReservingTogether(t *testing.T, proxies []*envoyhost.Plugin, user string, n, reserve int) []*envoyhost.Stream {
	return openTogether(vmsOf(proxies), n, func(vm *envoyhost.VM) (*envoyhost.Stream, bool) {
		return openGlobalReserving(t, vm, user, reserve)
	})
}

// TestAGlobalTokenBudgetIsOvershotByNoMoreThanTheOverRunsOfRequestsInFlight: two proxies of two
// workers, one service replica on a real Redis. The bound: requests in flight together are admitted
// only while their reservations fit (the service decides each atomically), so the budget is overshot
// by at most what they use beyond their reservations, and that is charged. 32 requests reserving 100
// each of 1000: exactly 10 are admitted. They settle at 30: 700 come back and exactly 7 more fit.
// Those use 150 each: the over-run, 7 × 50, is charged and the key is in debt.
func TestAGlobalTokenBudgetIsOvershotByNoMoreThanTheOverRunsOfRequestsInFlight(t *testing.T) {
	redis := redistest.Start(t)
	svc := startSettleService(t, redis.Addr())
	var proxies []*envoyhost.Plugin
	for range 2 {
		proxies = append(proxies, load(t, module(t, "meshlimit"), globalBudget(""), 2, toReplica(svc.addr)))
	}
	open := openGlobalReservingTogether(t, proxies, "alice", 32, 100)
	require.Len(t, open, 10, "reservations admitted together never exceed the budget")
	for _, s := range open {
		settleAnswer(t, s, 200, "application/json", usageOf(30))
	}
	svc.waitSettles(t, 10)
	open = openGlobalReservingTogether(t, proxies, "alice", 32, 100)
	require.Len(t, open, 7, "the 700 refunded fit 7 more reservations of 100")
	for _, s := range open {
		settleAnswer(t, s, 200, "application/json", usageOf(150))
	}
	svc.waitSettles(t, 17)
	_, ok := openGlobalReserving(t, proxies[0].VM(0), "alice", 1)
	assert.False(t, ok, "300 + 1050 used of 1000: the key is in debt")
	var settled, refund, overrun, failed int64
	for _, p := range proxies {
		settled += counter(p, "meshlimit.rule.tokens.settled")
		refund += counter(p, "meshlimit.rule.tokens.settle_refund")
		overrun += counter(p, "meshlimit.rule.tokens.settle_overrun")
		failed += counter(p, "meshlimit.rule.tokens.settle_call_failed")
		assert.Zero(t, counter(p, "meshlimit.global.failures"))
		assert.Zero(t, p.PollOneoffCalls())
	}
	assert.Equal(t, []int64{17, 700, 350, 0}, []int64{settled, refund, overrun, failed})
	s, ok := openGlobalReserving(t, proxies[1].VM(1), "bob", 1000)
	require.True(t, ok, "another key has its own budget")
	settleAnswer(t, s, 200, "application/json", usageOf(1000))
}

// TestAGlobalReservationIsRefundedOnA5xx: a 503 from the upstream gives the whole reservation back
// in the service, so the next request's full budget fits.
func TestAGlobalReservationIsRefundedOnA5xx(t *testing.T) {
	redis := redistest.Start(t)
	svc := startSettleService(t, redis.Addr())
	p := load(t, module(t, "meshlimit"), globalBudget(""), 1, toReplica(svc.addr))
	s, ok := openGlobalReserving(t, p.VM(0), "alice", 600)
	require.True(t, ok)
	settleAnswer(t, s, 503, "application/json", usageOf(600)) // an error's usage is not charged
	svc.waitSettles(t, 1)
	assert.Equal(t, int64(600), counter(p, "meshlimit.rule.tokens.settle_refund"))
	s, ok = openGlobalReserving(t, p.VM(0), "alice", 1000)
	require.True(t, ok, "the 600 came back")
	settleAnswer(t, s, 200, "application/json", usageOf(1000))
	svc.waitSettles(t, 1) // used as reserved: nothing to settle
	_, ok = openGlobalReserving(t, p.VM(0), "alice", 1)
	assert.False(t, ok, "the budget is spent")
}

// TestAGlobalReservationOfARequestALaterRuleDeniesIsRefunded: the service charges the token rule's
// reservation, then denies the request on a second rule in the same check: the reservation is given
// back at once (never forwarded, the request used nothing), and a request that fits only with it fits.
func TestAGlobalReservationOfARequestALaterRuleDeniesIsRefunded(t *testing.T) {
	redis := redistest.Start(t)
	svc := startSettleService(t, redis.Addr())
	cfg := globalBudget(`, {"name": "second", "scope": "global", "match": {"headers": [{"name": "x-second", "present": true}]},
		"key": [{"header": "x-user"}], "limits": [{"rate": "1/d", "name": "second"}]}`)
	p := load(t, module(t, "meshlimit"), cfg, 1, toReplica(svc.addr))
	second := [2]string{"x-second", "1"}
	s, ok := openGlobalReserving(t, p.VM(0), "alice", 400, second)
	require.True(t, ok)
	settleAnswer(t, s, 200, "application/json", usageOf(400)) // as reserved: no settle
	_, ok = openGlobalReserving(t, p.VM(0), "alice", 600, second)
	require.False(t, ok, "the second rule denies it, after tokens reserved 600")
	svc.waitSettles(t, 1)
	s, ok = openGlobalReserving(t, p.VM(0), "alice", 600)
	require.True(t, ok, "400 + 600 fit: the denied request's 600 came back")
	settleAnswer(t, s, 200, "application/json", usageOf(600))
	assert.Equal(t, int64(1), svc.settles.Load())
}

// TestAGlobalSettleThatIsLostKeepsTheReservationAndNeverBlocksTheStream: the service goes away
// while a completion runs; its refund is sent and lost, the response reaches the client whole, the
// breaker is left alone (a settle is not a check), and the reservation stays charged.
func TestAGlobalSettleThatIsLostKeepsTheReservationAndNeverBlocksTheStream(t *testing.T) {
	clock := envoyhost.NewClock(epoch)
	svc := startService(t, clock)
	p := load(t, module(t, "meshlimit"), globalBudget(""), 1, withService(svc, nil), func(c *envoyhost.Config) { c.Clock = clock })
	s, ok := openGlobalReserving(t, p.VM(0), "alice", 600)
	require.True(t, ok)
	svc.down.Store(true)
	settleAnswer(t, s, 200, "application/json", usageOf(100))
	assert.Equal(t, []byte(usageOf(100)), s.DownstreamBody())
	eventually(t, "the refund reached the service, which was down", func() bool { return svc.calls.Load() == 2 })
	assert.Equal(t, int64(500), counter(p, "meshlimit.rule.tokens.settle_refund"), "the refund was decided")
	assert.Zero(t, counter(p, "meshlimit.global.failures"), "a settle is not a check: the breaker does not count it")
	svc.down.Store(false)
	s, ok = openGlobalReserving(t, p.VM(0), "alice", 400)
	require.True(t, ok, "600 stayed charged: 400 still fit")
	settleAnswer(t, s, 200, "application/json", usageOf(400))
	_, ok = openGlobalReserving(t, p.VM(0), "alice", 1)
	assert.False(t, ok, "the refund was lost: the budget is spent")
}

// TestAGlobalSettleIsNotSentWhileTheBreakerIsOpenAndIsCounted: after the service failed three checks
// the breaker is open; a stream admitted before settles into nothing (no call, no probe taken) and
// the filter counts it.
func TestAGlobalSettleIsNotSentWhileTheBreakerIsOpenAndIsCounted(t *testing.T) {
	clock := envoyhost.NewClock(epoch)
	svc := startService(t, clock)
	p := load(t, module(t, "meshlimit"), globalBudget(""), 1, withService(svc, nil), func(c *envoyhost.Config) { c.Clock = clock })
	s, ok := openGlobalReserving(t, p.VM(0), "alice", 600)
	require.True(t, ok)
	svc.down.Store(true)
	for range 3 { // the default failure_mode allows them
		other, ok := openGlobalReserving(t, p.VM(0), "bob", 1)
		require.True(t, ok)
		require.NoError(t, other.Close())
	}
	require.Equal(t, int64(1), counter(p, "meshlimit.global.breaker_opened"))
	calls := svc.calls.Load()
	settleAnswer(t, s, 200, "application/json", usageOf(100))
	assert.Equal(t, int64(1), counter(p, "meshlimit.rule.tokens.settle_call_failed"))
	assert.Equal(t, calls, svc.calls.Load(), "no call while the breaker is open")
}

// globalBodyBudget is a global budget of 1000 tokens per user per day reserved from the max_tokens
// field of the request body (default 500, at most 4000, read from at most 256 bytes) and settled
// from usage.total_tokens.
// keepOnMissing makes a budget's answers without usage keep their reservation (on_missing
// "reservation"), for the tests of what was reserved.
func keepOnMissing(cfg string) string {
	return strings.Replace(cfg, `"settle": {"response_json": "usage.total_tokens"}`,
		`"settle": {"response_json": "usage.total_tokens", "on_missing": "reservation"}`, 1)
}

func globalBodyBudget(scope, extra string) string {
	return globalConfig(`{"name": "tokens", "scope": "` + scope + `", "key": [{"header": "x-user"}], "limits": [{"rate": "1000/d"}],
		"cost": {"request_json": "max_tokens", "default": 500, "max": 4000, "max_body": 256, "settle": {"response_json": "usage.total_tokens"}}}` + extra)
}

// TestAGlobalRuleReservesMaxTokensFromTheRequestBodyAndSettlesFromUsage: the call to the service
// waits for the body; the reservation is max_tokens, the body reaches the upstream whole, and the
// settle gives back what the usage did not take.
func TestAGlobalRuleReservesMaxTokensFromTheRequestBodyAndSettlesFromUsage(t *testing.T) {
	redis := redistest.Start(t)
	svc := startSettleService(t, redis.Addr())
	p := load(t, module(t, "meshlimit"), globalBodyBudget("global", ""), 1, toReplica(svc.addr))
	s, ok := postJSON(t, p.VM(0), "alice", maxTokens(300))
	require.True(t, ok)
	assert.Equal(t, []byte(maxTokens(300)), s.UpstreamBody(), "the held body went on whole")
	settleAnswer(t, s, 200, "application/json", usageOf(100))
	rl, _ := s.DownstreamHeaders().Get("ratelimit")
	assert.Contains(t, rl, `"tokens";r=700;`, "the quota after the reservation of 300")
	svc.waitSettles(t, 1)
	assert.Equal(t, int64(200), counter(p, "meshlimit.rule.tokens.settle_refund"))
	s, ok = postJSON(t, p.VM(0), "alice", maxTokens(900))
	require.True(t, ok, "100 used: 900 fit")
	settleAnswer(t, s, 200, "application/json", usageOf(900))
	_, ok = postJSON(t, p.VM(0), "alice", maxTokens(1))
	assert.False(t, ok, "the budget is spent")
	assert.Equal(t, int64(2), counter(p, "meshlimit.rule.tokens.settled"))
	assert.Zero(t, counter(p, "meshlimit.rule.tokens.bad_body"))
	assert.Zero(t, counter(p, "meshlimit.global.failures"))
	assert.Zero(t, counter(p, "meshlimit.panics"))
}

// TestConcurrentGlobalRequestsReservingFromTheirBodiesOvershootByNoMoreThanTheirOverRuns: two
// proxies of two workers, one service replica on a real Redis. The bound: requests in flight
// together are admitted only while the reservations their bodies name fit (the service decides each
// atomically), so the budget is overshot by at most the sum of what they use beyond their
// reservations (each capped by the rule's max), and that is charged. 32 bodies of max_tokens 100
// against 1000: exactly 10 are admitted; they settle at 30, and exactly 7 more fit; those use 150
// each: the over-run, 7 × 50, is charged and the key is in debt.
func TestConcurrentGlobalRequestsReservingFromTheirBodiesOvershootByNoMoreThanTheirOverRuns(t *testing.T) {
	redis := redistest.Start(t)
	svc := startSettleService(t, redis.Addr())
	var proxies []*envoyhost.Plugin
	for range 2 {
		proxies = append(proxies, load(t, module(t, "meshlimit"), globalBodyBudget("global", ""), 2, toReplica(svc.addr)))
	}
	open := openReserving(t, vmsOf(proxies), "alice", 32, 100)
	require.Len(t, open, 10, "reservations admitted together never exceed the budget")
	for _, s := range open {
		settleAnswer(t, s, 200, "application/json", usageOf(30))
	}
	svc.waitSettles(t, 10)
	open = openReserving(t, vmsOf(proxies), "alice", 32, 100)
	require.Len(t, open, 7, "the 700 refunded fit 7 more reservations of 100")
	for _, s := range open {
		settleAnswer(t, s, 200, "application/json", usageOf(150))
	}
	svc.waitSettles(t, 17)
	_, ok := postJSON(t, proxies[0].VM(0), "alice", maxTokens(1))
	assert.False(t, ok, "300 + 1050 used of 1000: the key is in debt")
	var settled, refund, overrun, failed int64
	for _, p := range proxies {
		settled += counter(p, "meshlimit.rule.tokens.settled")
		refund += counter(p, "meshlimit.rule.tokens.settle_refund")
		overrun += counter(p, "meshlimit.rule.tokens.settle_overrun")
		failed += counter(p, "meshlimit.rule.tokens.settle_call_failed")
		assert.Zero(t, counter(p, "meshlimit.global.failures"))
		assert.Zero(t, p.PollOneoffCalls())
	}
	assert.Equal(t, []int64{17, 700, 350, 0}, []int64{settled, refund, overrun, failed})
}

// TestAGlobalRuleWithAMalformedBodyReservesTheDefaultAndCountsIt: a body that is not JSON, a
// max_tokens of 0 or a string, a body that is not an object: each reserves the default (500) in the
// service, is counted, and the filter keeps working; an answer without usage keeps it.
func TestAGlobalRuleWithAMalformedBodyReservesTheDefaultAndCountsIt(t *testing.T) {
	redis := redistest.Start(t)
	svc := startSettleService(t, redis.Addr())
	bad := []string{`{"max_tokens": 3`, `{"max_tokens": 0}`, `{"max_tokens": "9"}`, `[]`, `max_tokens=7`}
	for i, body := range bad {
		t.Run(fmt.Sprintf("body %d", i), func(t *testing.T) {
			user := "user" + strconv.Itoa(i)
			p := load(t, module(t, "meshlimit"), keepOnMissing(globalBodyBudget("global", "")), 1, toReplica(svc.addr))
			s, ok := postJSON(t, p.VM(0), user, body)
			require.True(t, ok)
			assert.Equal(t, []byte(body), s.UpstreamBody())
			settleAnswer(t, s, 200, "application/json", `{"id": "no usage here"}`)
			assert.Equal(t, int64(1), counter(p, "meshlimit.rule.tokens.bad_body"))
			assert.Equal(t, int64(1), counter(p, "meshlimit.rule.tokens.settle_kept"), "no usage: the reservation stays")
			s, ok = postJSON(t, p.VM(0), user, maxTokens(500))
			require.True(t, ok, "500 of 1000 were reserved: 500 remain")
			settleAnswer(t, s, 200, "application/json", usageOf(500))
			_, ok = postJSON(t, p.VM(0), user, maxTokens(1))
			assert.False(t, ok, "the malformed body's default stayed charged")
			assert.Zero(t, counter(p, "meshlimit.panics"))
		})
	}
}

// TestABodyOverTheBoundOfAGlobalRuleReservesTheDefaultAndPassesWhole: the filter holds the body
// until it passes max_body (256): then it calls the service with the default (the body is not read)
// and the held body, with what came while the call was out, reaches the upstream whole. The filter
// copies none of it; the host holds at most max_body plus one chunk plus what arrives during the call.
func TestABodyOverTheBoundOfAGlobalRuleReservesTheDefaultAndPassesWhole(t *testing.T) {
	redis := redistest.Start(t)
	svc := startSettleService(t, redis.Addr())
	p := load(t, module(t, "meshlimit"), keepOnMissing(globalBodyBudget("global", "")), 1, toReplica(svc.addr))
	body := `{"max_tokens": 1, "pad": "` + strings.Repeat("x", 600) + `"}`
	s := p.VM(0).NewStream(envoyhost.StreamInfo{})
	_, err := s.SendRequestHeaders(envoyhost.Headers{{":method", "POST"}, {":path", "/v1/x"}, {":authority", "llm.test"}, {"x-user", "alice"}}, false)
	require.NoError(t, err)
	act, err := s.SendRequestBody([]byte(body[:200]), false)
	require.NoError(t, err)
	assert.Equal(t, envoyhost.ActionPause, act, "under the bound: held")
	act, err = s.SendRequestBody([]byte(body[200:400]), false)
	require.NoError(t, err)
	assert.Equal(t, envoyhost.ActionPause, act, "past the bound: the call is out")
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	act, err = s.Wait(ctx)
	require.NoError(t, err)
	require.Equal(t, envoyhost.ActionContinue, act, "the service admitted the default")
	act, err = s.SendRequestBody([]byte(body[400:]), true)
	require.NoError(t, err)
	assert.Equal(t, envoyhost.ActionContinue, act)
	assert.Equal(t, []byte(body), s.UpstreamBody())
	settleAnswer(t, s, 200, "application/json", `{"no": "usage"}`)
	assert.Equal(t, int64(1), counter(p, "meshlimit.rule.tokens.bad_body"))
	s, ok := postJSON(t, p.VM(0), "alice", maxTokens(500))
	require.True(t, ok, "the default of 500 was reserved, not max_tokens 1")
	settleAnswer(t, s, 200, "application/json", usageOf(500))
	_, ok = postJSON(t, p.VM(0), "alice", maxTokens(1))
	assert.False(t, ok)
}

// TestAGlobalRequestWhoseBodyNeverEndsHoldsNoWorkerAndIsChargedItsDefault: a client sends part of
// a body and stalls. No call is made while the body is held (at most max_body of it), the worker
// serves other streams meanwhile, and when the stream ends its default is charged by a settle.
func TestAGlobalRequestWhoseBodyNeverEndsHoldsNoWorkerAndIsChargedItsDefault(t *testing.T) {
	redis := redistest.Start(t)
	svc := startSettleService(t, redis.Addr())
	p := load(t, module(t, "meshlimit"), globalBodyBudget("global", ""), 1, toReplica(svc.addr))
	stalled := p.VM(0).NewStream(envoyhost.StreamInfo{})
	_, err := stalled.SendRequestHeaders(envoyhost.Headers{{":method", "POST"}, {":path", "/v1/x"}, {":authority", "llm.test"}, {"x-user", "alice"}}, false)
	require.NoError(t, err)
	act, err := stalled.SendRequestBody([]byte(`{"max_tokens": `), false)
	require.NoError(t, err)
	assert.Equal(t, envoyhost.ActionPause, act, "the body is held until it ends")
	assert.Zero(t, counter(p, "meshlimit.global.calls"), "no call before the body")
	s, ok := postJSON(t, p.VM(0), "bob", maxTokens(10))
	require.True(t, ok, "the same worker serves another stream")
	settleAnswer(t, s, 200, "application/json", usageOf(10))
	require.NoError(t, stalled.Close())
	svc.waitSettles(t, 1)
	assert.Equal(t, int64(1), counter(p, "meshlimit.rule.tokens.settle_kept"))
	s, ok = postJSON(t, p.VM(0), "alice", maxTokens(500))
	require.True(t, ok)
	settleAnswer(t, s, 200, "application/json", usageOf(500))
	_, ok = postJSON(t, p.VM(0), "alice", maxTokens(1))
	assert.False(t, ok, "the abandoned request was charged its default of 500")
}

// TestAGlobalClientThatSendsMaxTokensTwiceReservesTheHigher: parsers disagree on which duplicate
// member wins, so the reservation takes the higher, as a repeated cost header does (locally too).
func TestAGlobalClientThatSendsMaxTokensTwiceReservesTheHigher(t *testing.T) {
	redis := redistest.Start(t)
	svc := startSettleService(t, redis.Addr())
	p := load(t, module(t, "meshlimit"), globalBodyBudget("global", ""), 1, toReplica(svc.addr))
	s, ok := postJSON(t, p.VM(0), "alice", `{"max_tokens": 1, "model": "m", "max_tokens": 900}`)
	require.True(t, ok)
	_, ok = postJSON(t, p.VM(0), "alice", maxTokens(101))
	assert.False(t, ok, "900 are reserved, not 1")
	settleAnswer(t, s, 200, "application/json", usageOf(900))
	assert.Zero(t, counter(p, "meshlimit.rule.tokens.bad_body"))
}

// TestGlobalClientsThatReserveOneTokenAndUseTenThousandOweAllTheyWereCharged: two requests in
// flight reserve 1 each and use 10,000: each over-run is charged (capped by the rule's max, 4000),
// and the service carries the whole debt (7,000 of 1000/h, below 64 capacities): 500 are back only
// once 7,500 have refilled, 7 h 30 min later (before, the debt stopped at one capacity and 516 were
// back 91 minutes later).
func TestGlobalClientsThatReserveOneTokenAndUseTenThousandOweAllTheyWereCharged(t *testing.T) {
	clock := envoyhost.NewClock(epoch)
	svc := startService(t, clock)
	cfg := strings.Replace(globalBodyBudget("global", ""), "1000/d", "1000/h", 1) // the clock runs every tick: keep the wait short
	p := load(t, module(t, "meshlimit"), cfg, 1, withService(svc, nil), func(c *envoyhost.Config) { c.Clock = clock })
	s1, ok := postJSON(t, p.VM(0), "mallory", maxTokens(1))
	require.True(t, ok)
	s2, ok := postJSON(t, p.VM(0), "mallory", maxTokens(1))
	require.True(t, ok)
	settleAnswer(t, s1, 200, "application/json", usageOf(10000))
	settleAnswer(t, s2, 200, "application/json", usageOf(10000))
	assert.Equal(t, int64(2*3999), counter(p, "meshlimit.rule.tokens.settle_overrun"), "each charged up to the rule's max")
	eventually(t, "both settles applied", func() bool { return svc.calls.Load() == 4 })
	_, ok = postJSON(t, p.VM(0), "mallory", maxTokens(1))
	assert.False(t, ok, "the key is in debt")
	clock.Advance(91 * time.Minute)
	_, ok = postJSON(t, p.VM(0), "mallory", maxTokens(500))
	assert.False(t, ok, "the debt is not forgiven past one capacity: 91 minutes later 500 are not back")
	clock.Advance(7*time.Hour + 25*time.Minute - 91*time.Minute)
	_, ok = postJSON(t, p.VM(0), "mallory", maxTokens(500))
	assert.False(t, ok, "7,000 owed: 7 h 25 min later 500 are not back")
	clock.Advance(6 * time.Minute)
	s, ok := postJSON(t, p.VM(0), "mallory", maxTokens(500))
	require.True(t, ok, "7,000 owed: 7 h 31 min later 516 are back")
	settleAnswer(t, s, 200, "application/json", usageOf(500))
}

// openHeaders sends the headers of a POST of user that a body will follow, with extra headers, and
// waits for the filter's decision on them: the stream, still open, and whether they went upstream.
func openHeaders(t *testing.T, vm *envoyhost.VM, user string, extra ...[2]string) (*envoyhost.Stream, bool) {
	t.Helper()
	s := vm.NewStream(envoyhost.StreamInfo{SourceAddress: "10.0.0.1:40000"})
	h := envoyhost.Headers{{":method", "POST"}, {":path", "/v1/chat/completions"}, {":authority", "llm.test"},
		{":scheme", "http"}, {"x-user", user}, {"content-type", "application/json"}}
	_, err := s.SendRequestHeaders(append(h, extra...), false)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	act, err := s.Wait(ctx)
	require.NoError(t, err)
	return s, act == envoyhost.ActionContinue
}

// finishBody sends the rest of a request's body and waits for the filter's decision on it: whether
// the request was admitted (the body went on) or answered with a 429.
func finishBody(t *testing.T, s *envoyhost.Stream, body string) bool {
	t.Helper()
	_, err := s.SendRequestBody([]byte(body), true)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	act, err := s.Wait(ctx)
	require.NoError(t, err)
	if act != envoyhost.ActionContinue {
		require.NotNil(t, s.LocalReply())
		assert.Equal(t, 429, s.LocalReply().Status)
		return false
	}
	return true
}

// TestAGlobalRuleThatReadsNoBodyIsDecidedWithTheHeadersWhileABodyRuleWaitsForTheBody: a request
// with a global rule reading the body, a global rule counting calls and a local rule. The local
// rule and the counting rule decide with the headers (a denial there waits for no body, and the
// headers never reach the upstream); only the body rule waits for the body, in a call of its own.
func TestAGlobalRuleThatReadsNoBodyIsDecidedWithTheHeadersWhileABodyRuleWaitsForTheBody(t *testing.T) {
	clock := envoyhost.NewClock(epoch)
	svc := startService(t, clock)
	cfg := globalBodyBudget("global", `, {"name": "calls", "scope": "global", "key": [{"header": "x-user"}], "limits": [{"rate": "2/d", "name": "calls"}]},
		{"name": "local", "key": [{"header": "x-user"}], "limits": [{"rate": "3/d", "name": "local"}]}`)
	p := load(t, module(t, "meshlimit"), cfg, 1, withService(svc, nil), func(c *envoyhost.Config) { c.Clock = clock })
	for i := range 2 {
		s, ok := openHeaders(t, p.VM(0), "alice")
		require.True(t, ok, "request %d: the headers are admitted", i)
		assert.NotNil(t, s.UpstreamHeaders(), "request %d: the headers went on before the body", i)
		assert.Equal(t, int64(2*i+1), counter(p, "meshlimit.global.calls"), "request %d: the headers' call", i)
		require.True(t, finishBody(t, s, maxTokens(100)), "request %d", i)
		assert.Equal(t, int64(2*i+2), counter(p, "meshlimit.global.calls"), "request %d: the body's call", i)
		settleAnswer(t, s, 200, "application/json", usageOf(100))
	}
	s, ok := openHeaders(t, p.VM(0), "alice")
	assert.False(t, ok, "the third call of 2/d is denied with its headers")
	require.NotNil(t, s.LocalReply())
	assert.Equal(t, 429, s.LocalReply().Status)
	assert.Nil(t, s.UpstreamHeaders(), "denied headers never reach the upstream")
	assert.Equal(t, "calls", s.FilterState()["wasm.meshlimit.rule"])
	require.NoError(t, s.Close())
	assert.Equal(t, int64(5), counter(p, "meshlimit.global.calls"), "no body call for a request denied with its headers")
	assert.Equal(t, int64(1), counter(p, "meshlimit.rule.calls.limited"))
	assert.Equal(t, int64(2), counter(p, "meshlimit.rule.tokens.allowed"), "the denied request never reserved tokens")
	assert.Zero(t, counter(p, "meshlimit.rule.tokens.settle_kept"), "nor is it charged the body rule's default")
	_, ok = openHeaders(t, p.VM(0), "alice")
	assert.False(t, ok, "the calls rule still denies, from its over-limit cache")
	assert.Zero(t, counter(p, "meshlimit.rule.local.limited"), "the denied requests gave the local rule's unit back")
	assert.Equal(t, int64(2), counter(p, "meshlimit.rule.local.given_back"))
	assert.Equal(t, int64(5), counter(p, "meshlimit.global.calls"), "denied from the over-limit cache: no call")
	assert.Zero(t, counter(p, "meshlimit.panics"))
}

// headerBudget is a second global rule, read from no body: a budget of rate per x-user reserved
// from the x-cost header and settled from the answer's x-used header (globalBodyBudget's extra).
func headerBudget(rate string) string {
	return `, {"name": "budget", "scope": "global", "key": [{"header": "x-user"}], "limits": [{"rate": "` + rate + `", "name": "budget"}],
		"cost": {"header": "x-cost", "default": 1, "settle": {"response_header": "x-used"}}}`
}

// TestARequestWithBothKindsOfGlobalRulesMakesOneCallAtTheHeadersAndOneWithTheBody: the call made
// with the headers carries the rule that reads no body, the one made with the body the rule that
// reads it; the quota the answer reports names both, and each reservation settles.
func TestARequestWithBothKindsOfGlobalRulesMakesOneCallAtTheHeadersAndOneWithTheBody(t *testing.T) {
	redis := redistest.Start(t)
	svc := startSettleService(t, redis.Addr())
	cfg := globalBodyBudget("global", headerBudget("5000/d"))
	p := load(t, module(t, "meshlimit"), cfg, 1, toReplica(svc.addr))
	s, ok := openHeaders(t, p.VM(0), "alice", [2]string{"x-cost", "2000"})
	require.True(t, ok)
	assert.Equal(t, int64(1), counter(p, "meshlimit.global.calls"), "the headers' call, made before any body")
	assert.Empty(t, s.UpstreamBody())
	require.True(t, finishBody(t, s, maxTokens(300)))
	assert.Equal(t, int64(2), counter(p, "meshlimit.global.calls"), "the body's call")
	assert.Equal(t, []byte(maxTokens(300)), s.UpstreamBody(), "the held body went on whole")
	h := envoyhost.Headers{{":status", "200"}, {"content-type", "application/json"}, {"x-used", "500"}}
	_, err := s.SendResponseHeaders(h, false)
	require.NoError(t, err)
	rl, _ := s.DownstreamHeaders().Get("ratelimit")
	assert.Contains(t, rl, `"tokens";r=700;`, "the body's reservation of 300")
	assert.Contains(t, rl, `"budget";r=3000;`, "the headers' reservation of 2000")
	_, err = s.SendResponseBody([]byte(usageOf(100)), true)
	require.NoError(t, err)
	require.NoError(t, s.Close())
	svc.waitSettles(t, 2)
	assert.Equal(t, int64(1500+200), counter(p, "meshlimit.rule.budget.settle_refund")+counter(p, "meshlimit.rule.tokens.settle_refund"))
	s, ok = openHeaders(t, p.VM(0), "alice", [2]string{"x-cost", "4500"})
	require.True(t, ok, "500 of 5000 used: 4500 fit")
	require.True(t, finishBody(t, s, maxTokens(900)), "100 of 1000 used: 900 fit")
	settleAnswer(t, s, 200, "application/json", usageOf(900))
	assert.Zero(t, counter(p, "meshlimit.global.failures"))
	assert.Zero(t, counter(p, "meshlimit.panics"))
}

// TestABodyStageDenialRefundsWhatTheHeadersStageReserved: the headers' call reserves 600 of a
// budget that settles; the body's call then denies the request (its max_tokens does not fit). The
// request never reached the upstream but for its headers: the 600 are refunded, the rule that
// denied is named, and a request reserving the whole budget fits.
func TestABodyStageDenialRefundsWhatTheHeadersStageReserved(t *testing.T) {
	redis := redistest.Start(t)
	svc := startSettleService(t, redis.Addr())
	cfg := globalBodyBudget("global", headerBudget("1000/d"))
	p := load(t, module(t, "meshlimit"), cfg, 1, toReplica(svc.addr))
	s, ok := openHeaders(t, p.VM(0), "alice", [2]string{"x-cost", "600"})
	require.True(t, ok, "600 of the budget's 1000 reserved with the headers")
	assert.False(t, finishBody(t, s, maxTokens(2000)), "2000 tokens of 1000: denied with the body")
	assert.Equal(t, "tokens", s.FilterState()["wasm.meshlimit.rule"], "the body's rule denied")
	require.NoError(t, s.Close())
	svc.waitSettles(t, 1)
	assert.Equal(t, int64(1), counter(p, "meshlimit.rule.tokens.limited"))
	s, ok = openHeaders(t, p.VM(0), "alice", [2]string{"x-cost", "1000"})
	require.True(t, ok, "the 600 of the denied request were refunded")
	require.True(t, finishBody(t, s, maxTokens(1000)), "the denied request reserved no tokens")
	settleAnswer(t, s, 200, "application/json", usageOf(1000))
	assert.Zero(t, counter(p, "meshlimit.panics"))
}

// TestAScopeBothRuleSettlesLocallyAndGlobally: two proxies on one Redis. A rule of both scopes
// reserves max_tokens in this proxy's shared data and in the service; the usage settles both. The
// second request on the first proxy fits only if its local reservation was refunded; the request on
// the second proxy sees the global counter the first proxy's settle left.
func TestAScopeBothRuleSettlesLocallyAndGlobally(t *testing.T) {
	redis := redistest.Start(t)
	svc := startSettleService(t, redis.Addr())
	a := load(t, module(t, "meshlimit"), globalBodyBudget("both", ""), 1, toReplica(svc.addr))
	b := load(t, module(t, "meshlimit"), globalBodyBudget("both", ""), 1, toReplica(svc.addr))
	s, ok := postJSON(t, a.VM(0), "alice", maxTokens(600))
	require.True(t, ok)
	settleAnswer(t, s, 200, "application/json", usageOf(100))
	svc.waitSettles(t, 1)
	assert.Equal(t, int64(1000), counter(a, "meshlimit.rule.tokens.settle_refund"), "500 locally and 500 in the service")
	s, ok = postJSON(t, a.VM(0), "alice", maxTokens(900))
	require.True(t, ok, "100 used locally and globally: 900 fit in both")
	settleAnswer(t, s, 200, "application/json", usageOf(900))
	_, ok = postJSON(t, b.VM(0), "alice", maxTokens(1))
	assert.False(t, ok, "the other proxy's local budget is untouched, the global one is spent")
	assert.Equal(t, int64(1), counter(b, "meshlimit.rule.tokens.limited"))
	assert.Equal(t, int64(4), counter(a, "meshlimit.rule.tokens.settled"), "two reservations per request")
	assert.Zero(t, counter(a, "meshlimit.rule.tokens.bad_body"))
	assert.Equal(t, int64(1), svc.settles.Load(), "the second request used what it reserved: nothing to send")
}

// TestAGlobalBodyRequestWhoseServiceFailsIsDecidedByTheFallbackWithItsBodysReservation: the call
// made at the body stage fails; the rule's fallback limits decide with the reservation the body
// named, resuming the request (its body goes on whole) or denying it from the body stage.
func TestAGlobalBodyRequestWhoseServiceFailsIsDecidedByTheFallbackWithItsBodysReservation(t *testing.T) {
	clock := envoyhost.NewClock(epoch)
	svc := startService(t, clock)
	cfg := strings.Replace(globalBodyBudget("global", ""), `"cost"`, `"fallback": [{"rate": "1000/d", "name": "fb"}], "cost"`, 1)
	p := load(t, module(t, "meshlimit"), cfg, 1, withService(svc, nil), func(c *envoyhost.Config) { c.Clock = clock })
	svc.down.Store(true)
	s, ok := postJSON(t, p.VM(0), "alice", maxTokens(600))
	require.True(t, ok, "600 of the fallback's 1000")
	assert.Equal(t, []byte(maxTokens(600)), s.UpstreamBody())
	settleAnswer(t, s, 200, "application/json", usageOf(10))
	_, ok = postJSON(t, p.VM(0), "alice", maxTokens(600))
	assert.False(t, ok, "the fallback charged the body's 600, and nothing was settled")
	assert.Equal(t, int64(2), counter(p, "meshlimit.global.failures"))
	assert.Equal(t, int64(2), counter(p, "meshlimit.rule.tokens.fallback"))
	assert.Zero(t, counter(p, "meshlimit.rule.tokens.settled"), "a fallback decision reserves nothing in the service")
	assert.Zero(t, counter(p, "meshlimit.panics"))
}

// TestChunksThatArriveWhileTheBodyStageCallIsOutWaitAndPassWhole: the service answers slowly; the
// chunks that come while the call is out are held with the body (the host buffers them, the filter
// copies none) and reach the upstream, whole and in order, when the answer resumes the request.
func TestChunksThatArriveWhileTheBodyStageCallIsOutWaitAndPassWhole(t *testing.T) {
	clock := envoyhost.NewClock(epoch)
	svc := startService(t, clock)
	release := svc.hold() // the answer comes when the test says: after the chunks and trailers below
	defer release()
	p := load(t, module(t, "meshlimit"), globalBodyBudget("global", ""), 1, withService(svc, nil), func(c *envoyhost.Config) { c.Clock = clock })
	body := `{"max_tokens": 300, "messages": "` + strings.Repeat("m", 500) + `"}`
	s := p.VM(0).NewStream(envoyhost.StreamInfo{})
	_, err := s.SendRequestHeaders(envoyhost.Headers{{":method", "POST"}, {":path", "/v1/x"}, {":authority", "llm.test"}, {"x-user", "alice"}}, false)
	require.NoError(t, err)
	cuts := []int{0, 300, 400, 500, len(body)} // the first chunk passes max_body (256): the call goes out
	for i := 1; i < len(cuts); i++ {
		act, err := s.SendRequestBody([]byte(body[cuts[i-1]:cuts[i]]), i == len(cuts)-1)
		require.NoError(t, err)
		assert.Equal(t, envoyhost.ActionPause, act, "chunk %d: held", i)
	}
	assert.Empty(t, s.UpstreamBody(), "nothing passed while the call was out")
	release()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	act, err := s.Wait(ctx)
	require.NoError(t, err)
	require.Equal(t, envoyhost.ActionContinue, act)
	assert.Equal(t, []byte(body), s.UpstreamBody())
	assert.Equal(t, int64(1), counter(p, "meshlimit.global.calls"))
	assert.Equal(t, int64(1), counter(p, "meshlimit.rule.tokens.bad_body"), "cut at max_body (256): the default")
	settleAnswer(t, s, 200, "application/json", usageOf(500))
	assert.Zero(t, counter(p, "meshlimit.rule.tokens.settle_overrun"), "500 used, 500 reserved")
	assert.Zero(t, counter(p, "meshlimit.panics"))
}
