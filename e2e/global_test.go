package e2e

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/internal/envoyhost"
	"github.com/meshlimit/meshlimit/service"
	"github.com/meshlimit/meshlimit/service/memstore"
	"github.com/meshlimit/meshlimit/wire"
)

// decisionService runs the real decision service (in-memory store, on the given clock) on a loopback
// port, behind a switch that can make it slow or take it away.
type decisionService struct {
	srv   *httptest.Server
	calls atomic.Int64
	down  atomic.Bool  // answer nothing: the connection is closed (Envoy: 503 upstream connect error)
	slow  atomic.Int64 // sleep this long before answering (ns)
	gate  atomic.Pointer[chan struct{}]
}

// hold makes the service hold every call until the returned release is called (or the caller gives
// up on the call): an answer that comes exactly when the test says, however fast this machine.
func (d *decisionService) hold() (release func()) {
	gate := make(chan struct{})
	d.gate.Store(&gate)
	var once sync.Once
	return func() { once.Do(func() { d.gate.Store(nil); close(gate) }) }
}

func startService(t testing.TB, clock *envoyhost.Clock) *decisionService {
	t.Helper()
	store := memstore.New(memstore.Config{SweepInterval: -1, Clock: clock.Now})
	t.Cleanup(func() { _ = store.Close() })
	h, err := service.NewHandler(service.Config{Store: store, Timeout: time.Second})
	require.NoError(t, err)
	d := &decisionService{}
	d.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != wire.ResetsPath { // calls counts the decision calls, not the ticks' polls of the reset log
			d.calls.Add(1)
		}
		if d.down.Load() {
			if hj, ok := w.(http.Hijacker); ok {
				c, _, _ := hj.Hijack()
				_ = c.Close()
				return
			}
		}
		if g := d.gate.Load(); g != nil {
			select {
			case <-*g:
			case <-r.Context().Done():
				return
			}
		}
		if s := d.slow.Load(); s > 0 {
			time.Sleep(time.Duration(s))
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(d.srv.Close)
	return d
}

func (d *decisionService) addr() string { return strings.TrimPrefix(d.srv.URL, "http://") }

func globalConfig(rule string) string {
	return `{"global":{"cluster":"outbound|8081||meshlimit.meshlimit.svc.cluster.local","timeout":"200ms",
		"breaker":{"failures":3,"cooldown":"10s"}},"rules":[` + rule + `]}`
}

func withService(d *decisionService, proc *envoyhost.Process) func(*envoyhost.Config) {
	return func(c *envoyhost.Config) {
		c.Clusters = map[string]string{"outbound|8081||meshlimit.meshlimit.svc.cluster.local": d.addr()}
		if proc != nil {
			c.Process = proc
		}
	}
}

func TestAGlobalLimitCountsAcrossWorkersAndAcrossProxies(t *testing.T) {
	clock := envoyhost.NewClock(epoch)
	svc := startService(t, clock)
	cfg := globalConfig(`{"name":"per-user","scope":"global","key":[{"header":"x-user"}],"limits":[{"name":"user","rate":"6/m"}]}`)
	// Two Envoys (two processes: separate shared data) with two workers each, one decision service.
	var proxies []*envoyhost.Plugin
	for range 2 {
		proxies = append(proxies, load(t, module(t, "meshlimit"), cfg, 2, withService(svc, envoyhost.NewProcess()),
			func(c *envoyhost.Config) { c.Clock = clock }))
	}
	var admitted, denied atomic.Int64
	var wg sync.WaitGroup
	for _, p := range proxies {
		for _, vm := range p.VMs() {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 3 {
					res := roundTrip(t, vm, get("api.example", "/orders", "192.0.2.1", [2]string{"x-user", "alice"}))
					if res.LocalReply == nil {
						admitted.Add(1)
						rl, _ := res.Downstream.Get("ratelimit")
						assert.Contains(t, rl, `"user";r=`, "the service's quota reaches the client")
					} else {
						assert.Equal(t, 429, res.LocalReply.Status)
						denied.Add(1)
					}
				}
			}()
		}
	}
	wg.Wait()
	assert.Equal(t, int64(6), admitted.Load(), "18 requests on 6 VMs of 2 proxies share one quota of 6")
	assert.Equal(t, int64(12), denied.Load())
	for _, p := range proxies {
		assert.Zero(t, counter(p, "meshlimit.global.failures"))
		assert.Zero(t, p.PollOneoffCalls())
	}
}

func TestADeniedKeyIsAnsweredFromTheOverLimitCacheUntilItsRetryAfter(t *testing.T) {
	clock := envoyhost.NewClock(epoch)
	svc := startService(t, clock)
	p := load(t, module(t, "meshlimit"), globalConfig(`{"name":"per-ip","scope":"global","key":["client_ip"],"limits":[{"rate":"2/m"}]}`),
		2, withService(svc, nil), func(c *envoyhost.Config) { c.Clock = clock })
	req := func(vm int) envoyhost.Result { return roundTrip(t, p.VM(vm), get("a.example", "/", "198.51.100.7")) }
	require.Nil(t, req(0).LocalReply)
	require.Nil(t, req(1).LocalReply)
	first := req(0)
	require.NotNil(t, first.LocalReply, "the service denies the third")
	retry, _ := first.LocalReply.Headers.Get("retry-after")
	assert.Equal(t, "30", retry)
	calls := svc.calls.Load()

	for vm := range 2 {
		res := req(vm)
		require.NotNil(t, res.LocalReply, "every worker answers from the shared over-limit cache")
		assert.Equal(t, 429, res.LocalReply.Status)
		r, _ := res.LocalReply.Headers.Get("retry-after")
		assert.Equal(t, "30", r)
	}
	assert.Equal(t, calls, svc.calls.Load(), "without calling the service")
	assert.Equal(t, int64(2), counter(p, "meshlimit.rule.per-ip.cached_denials"))

	clock.Advance(30 * time.Second)
	assert.Nil(t, req(1).LocalReply, "after Retry-After the service is asked again, and a token is back")
	assert.Equal(t, calls+1, svc.calls.Load())
}

func TestWhenTheServiceFailsRulesFailOpenOrClosedAsConfigured(t *testing.T) {
	for _, tc := range []struct {
		name, mode string
		want       int
	}{
		{"a fail-open rule lets requests through", "allow", 200},
		{"a fail-closed rule denies them", "deny", 429},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := envoyhost.NewClock(epoch)
			svc := startService(t, clock)
			svc.down.Store(true)
			p := load(t, module(t, "meshlimit"), globalConfig(`{"name":"g","scope":"global","key":["client_ip"],
				"limits":[{"rate":"100/s"}],"failure_mode":"`+tc.mode+`"}`), 1, withService(svc, nil),
				func(c *envoyhost.Config) { c.Clock = clock })
			res := roundTrip(t, p.VM(0), get("a.example", "/", "192.0.2.50"))
			assert.Equal(t, tc.want, status(res))
			assert.Equal(t, int64(1), counter(p, "meshlimit.global.failures"))
			assert.NoError(t, p.VM(0).Failed())
		})
	}
}

func TestATimedOutCallFailsOpenAtTheTimeout(t *testing.T) {
	clock := envoyhost.NewClock(epoch)
	svc := startService(t, clock)
	release := svc.hold()
	defer release()
	p := load(t, module(t, "meshlimit"), globalConfig(`{"name":"g","scope":"global","key":["client_ip"],"limits":[{"rate":"100/s"}]}`),
		1, withService(svc, nil), func(c *envoyhost.Config) { c.Clock = clock })
	s, act := send(t, p.VM(0), get("a.example", "/", "192.0.2.51"))
	require.Equal(t, envoyhost.ActionPause, act, "the request waits for the service")
	eventually(t, "the call reaches the service", func() bool { return svc.calls.Load() == 1 })
	clock.Advance(199 * time.Millisecond)
	assert.Equal(t, envoyhost.ActionPause, state(t, s), "before the 200ms timeout the request still waits")
	clock.Advance(time.Millisecond)
	assert.Equal(t, envoyhost.ActionContinue, state(t, s), "at the timeout (a 504 from Envoy) the request fails open, with the service still holding the call")
	assert.Nil(t, s.LocalReply())
	assert.Equal(t, int64(1), counter(p, "meshlimit.global.failures"))
}

func TestTheBreakerOpensAfterRepeatedFailuresAndTheFallbackLimitApplies(t *testing.T) {
	clock := envoyhost.NewClock(epoch)
	svc := startService(t, clock)
	p := load(t, module(t, "meshlimit"), globalConfig(`{"name":"g","scope":"global","key":["client_ip"],
		"limits":[{"rate":"100/h"}],"fallback":[{"rate":"4/m"}]}`), 1, withService(svc, nil),
		func(c *envoyhost.Config) { c.Clock = clock })
	vm := p.VM(0)
	require.Nil(t, roundTrip(t, vm, get("a.example", "/", "192.0.2.60")).LocalReply, "the service is up")

	svc.down.Store(true)
	var codes []int
	for range 6 {
		codes = append(codes, status(roundTrip(t, vm, get("a.example", "/", "192.0.2.60"))))
	}
	assert.Equal(t, []int{200, 200, 200, 200, 429, 429}, codes, "the fallback's 4/m applies while the service is down")
	assert.Equal(t, int64(3), counter(p, "meshlimit.global.failures"), "three failed calls open the breaker")
	assert.Equal(t, int64(1), counter(p, "meshlimit.global.breaker_opened"))
	assert.Equal(t, int64(3), counter(p, "meshlimit.global.short_circuited"), "then nothing is sent")
	callsWhileOpen := svc.calls.Load()

	svc.down.Store(false)
	clock.Advance(11 * time.Second) // past the cooldown: one probe goes through and closes the breaker
	res := roundTrip(t, vm, get("a.example", "/", "192.0.2.60"))
	assert.Equal(t, 200, status(res))
	assert.Equal(t, callsWhileOpen+1, svc.calls.Load())
	rl, _ := res.Downstream.Get("ratelimit")
	assert.Contains(t, rl, `"g";r=98`, "the service counts again (two requests so far reached it)")
}

func TestABothScopeRuleMustPassTheLocalAndTheGlobalLimit(t *testing.T) {
	clock := envoyhost.NewClock(epoch)
	svc := startService(t, clock)
	p := load(t, module(t, "meshlimit"), globalConfig(`{"name":"b","scope":"both","key":["client_ip"],"limits":[{"rate":"3/m"}]}`),
		1, withService(svc, nil), func(c *envoyhost.Config) { c.Clock = clock })
	var codes []int
	for range 4 {
		codes = append(codes, status(roundTrip(t, p.VM(0), get("a.example", "/", "192.0.2.70"))))
	}
	assert.Equal(t, []int{200, 200, 200, 429}, codes)
	assert.Equal(t, int64(3), svc.calls.Load(), "the local limit denied the 4th before any call")
}
