package e2e

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/internal/envoyhost"
	"github.com/meshlimit/meshlimit/internal/redistest"
	"github.com/meshlimit/meshlimit/service"
)

// settleService is a replica of the decision service on a real Redis that counts the settle calls it
// has applied (the filter never waits for them: a test waits here).
type settleService struct {
	addr    string
	settles atomic.Int64
}

func startSettleService(t *testing.T, redisAddr string) *settleService {
	t.Helper()
	store, err := service.NewRedisStore(service.RedisConfig{Addrs: []string{redisAddr}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = store.Close() })
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
	redistest.WaitFor(t, 10*time.Second, strconv.FormatInt(n, 10)+" settles applied", func() bool { return s.settles.Load() >= n })
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
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
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

// openGlobalReservingTogether opens n streams of user at once through every VM of the proxies, each reserving
// reserve, and returns those admitted, still open.
func openGlobalReservingTogether(t *testing.T, proxies []*envoyhost.Plugin, user string, n, reserve int) []*envoyhost.Stream {
	var mu sync.Mutex
	var open []*envoyhost.Stream
	var wg sync.WaitGroup
	var vms []*envoyhost.VM
	for _, p := range proxies {
		vms = append(vms, p.VMs()...)
	}
	for _, vm := range vms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range n / len(vms) {
				if s, ok := openGlobalReserving(t, vm, user, reserve); ok {
					mu.Lock()
					open = append(open, s)
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	return open
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
	redistest.WaitFor(t, 10*time.Second, "the refund reached the service, which was down", func() bool { return svc.calls.Load() == 2 })
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
