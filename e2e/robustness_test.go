package e2e

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/internal/envoyhost"
)

// Issue 10, findings 6 and 9: the limiter must not fail open by surprise, and a panic must never remove
// limiting. These tests run the compiled module on several worker VMs.

// neverAnswers returns the address of a loopback server that accepts connections and never answers.
func neverAnswers(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return ln.Addr().String()
}

// answering returns the address of a loopback server that answers every call with status and body,
// after delay, and counts the calls.
func answering(t *testing.T, status int, body string, delay time.Duration, calls *atomic.Int64) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		time.Sleep(delay)
		w.Header().Set("content-type", "application/json")
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// heldAnswer returns the address of a loopback server that answers every call with status and body
// once release is called, and counts the calls.
func heldAnswer(t *testing.T, status int, body string, calls *atomic.Int64) (addr string, release func()) {
	t.Helper()
	gate := make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(gate) }) }
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		select {
		case <-gate:
		case <-r.Context().Done():
			return
		}
		w.Header().Set("content-type", "application/json")
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(release)
	return strings.TrimPrefix(srv.URL, "http://"), release
}

func toCluster(addr string, clock *envoyhost.Clock) func(*envoyhost.Config) {
	return func(c *envoyhost.Config) {
		c.Clusters = map[string]string{serviceCluster: addr}
		c.Clock = clock
	}
}

func noCallTimeouts(c *envoyhost.Config) { c.NoCallTimeouts = true }

// send starts a request on vm and returns its stream and the action of its request headers.
func send(t *testing.T, vm *envoyhost.VM, req *envoyhost.Request) (*envoyhost.Stream, envoyhost.Action) {
	t.Helper()
	s := vm.NewStream(req.Info)
	t.Cleanup(func() { _ = s.Close() })
	act, err := s.SendRequestHeaders(req.Headers, true)
	require.NoError(t, err)
	return s, act
}

func wait(t *testing.T, s *envoyhost.Stream) envoyhost.Action {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	act, err := s.Wait(ctx)
	require.NoError(t, err)
	return act
}

// TestARequestNeverWaitsOnAServiceThatNeverAnswersLongerThanTheTimeoutAndATick is finding 9's deadline:
// on a host whose callout timeout never fires (Kuadrant wasm-shim #425) and a service that never answers,
// the filter gives up on its own timer and the rule's failure_mode decides: the request waited at most
// global.timeout (200ms) + the deadline slack (5ms) + one tick (20ms).
func TestARequestNeverWaitsOnAServiceThatNeverAnswersLongerThanTheTimeoutAndATick(t *testing.T) {
	for _, tc := range []struct {
		name, mode string
		want       int
	}{
		{"a fail-open rule lets the request through", "allow", 200},
		{"a fail-closed rule denies it", "deny", 429},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := envoyhost.NewClock(epoch)
			p := load(t, module(t, "meshlimit"), globalConfig(`{"name":"g","scope":"global","key":["client_ip"],
				"limits":[{"rate":"100/s"}],"failure_mode":"`+tc.mode+`"}`), 2, toCluster(neverAnswers(t), clock), noCallTimeouts)
			var streams []*envoyhost.Stream
			for vm := range 2 {
				s, act := send(t, p.VM(vm), get("a.example", "/", "192.0.2.80"))
				require.Equal(t, envoyhost.ActionPause, act, "the request waits for the service")
				streams = append(streams, s)
			}
			clock.Advance(200 * time.Millisecond)
			for _, s := range streams {
				assert.Equal(t, envoyhost.ActionPause, state(t, s), "the host's timeout never fires")
			}
			clock.Advance(25 * time.Millisecond)
			for _, s := range streams {
				act := wait(t, s)
				if tc.want == 200 {
					assert.Equal(t, envoyhost.ActionContinue, act)
					assert.Nil(t, s.LocalReply())
				} else {
					require.NotNil(t, s.LocalReply())
					assert.Equal(t, 429, s.LocalReply().Status)
				}
			}
			assert.Equal(t, int64(2), counter(p, "meshlimit.global.deadline_expired"))
			assert.Equal(t, int64(2), counter(p, "meshlimit.global.failures"))
			for _, vm := range p.VMs() {
				assert.NoError(t, vm.Failed())
			}
		})
	}
}

// TestAnAnswerAfterTheDeadlineIsIgnored: the request was decided at its deadline; a denial arriving
// later must not answer it a second time.
func TestAnAnswerAfterTheDeadlineIsIgnored(t *testing.T) {
	clock := envoyhost.NewClock(epoch)
	var calls atomic.Int64
	deny := `{"allowed":false,"decisions":[{"allowed":false,"limit":1,"remaining":0,"reset_ms":1000,"retry_after_ms":1000}]}`
	addr, release := heldAnswer(t, 200, deny, &calls)
	p := load(t, module(t, "meshlimit"), globalConfig(`{"name":"g","scope":"global","key":["client_ip"],"limits":[{"rate":"1/s"}]}`),
		1, toCluster(addr, clock), noCallTimeouts)
	s, act := send(t, p.VM(0), get("a.example", "/", "192.0.2.81"))
	require.Equal(t, envoyhost.ActionPause, act)
	clock.Advance(225 * time.Millisecond)
	assert.Equal(t, envoyhost.ActionContinue, wait(t, s), "resumed at the deadline (failure_mode allow)")
	release() // the denial comes after the deadline
	eventually(t, "the late answer arrives", func() bool { return counter(p, "meshlimit.global.late_answers") == 1 })
	assert.Nil(t, s.LocalReply(), "the late denial is ignored")
	assert.Zero(t, counter(p, "meshlimit.rule.g.limited"))
	assert.NoError(t, p.VM(0).Failed())
}

// TestACheckTheServiceRefusesIsNotAnOutage is finding 6: a 4xx answer (the service refusing the check)
// is counted, logged at warn at most once per 10 s per worker, and decided by the rule's failure_mode:
// not by the fallback, and without opening the breaker, so every request still asks the service.
func TestACheckTheServiceRefusesIsNotAnOutage(t *testing.T) {
	for _, tc := range []struct {
		name, mode string
		want       int
	}{
		{"a fail-closed rule with a fallback denies: the fallback is for outages", "deny", 429},
		{"a fail-open rule lets the request through", "allow", 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := envoyhost.NewClock(epoch)
			var calls atomic.Int64
			refused := `{"error":{"field":"descriptors","message":"65 descriptors, at most 64 allowed"}}`
			p := load(t, module(t, "meshlimit"), globalConfig(`{"name":"g","scope":"global","key":["client_ip"],
				"limits":[{"rate":"100/s"}],"fallback":[{"rate":"1000/s"}],"failure_mode":"`+tc.mode+`"}`),
				2, toCluster(answering(t, 400, refused, 0, &calls), clock))
			for i := range 6 {
				res := roundTrip(t, p.VM(i%2), get("a.example", "/", "192.0.2.82"))
				assert.Equal(t, tc.want, status(res), "request %d", i)
			}
			assert.Equal(t, int64(6), calls.Load(), "the breaker (3 failures) never opened: every request asked")
			assert.Equal(t, int64(6), counter(p, "meshlimit.global.rejected"))
			assert.Zero(t, counter(p, "meshlimit.global.failures"))
			assert.Zero(t, counter(p, "meshlimit.global.breaker_opened"))
			assert.Zero(t, counter(p, "meshlimit.rule.g.fallback"))
			// The reset log's poll gets the same 400 from this server, and warns with its body too.
			assert.Equal(t, 2, countLogs(p, envoyhost.LogWarn, "refused the check (status 400: "+refused), "one warning per worker, with the service's reason")

			clock.Advance(10 * time.Second)
			roundTrip(t, p.VM(0), get("a.example", "/", "192.0.2.82"))
			assert.Equal(t, 3, countLogs(p, envoyhost.LogWarn, "refused the check"), "and again after 10 s")
		})
	}
}

func countLogs(p *envoyhost.Plugin, level envoyhost.LogLevel, substr string) int {
	n := 0
	for _, e := range p.Logs() {
		if e.Level == level && strings.Contains(e.Message, substr) {
			n++
		}
	}
	return n
}

// TestAPluginNameOfThreeHundredBytesStartsAndItsGlobalLimitIsEnforced is finding 8 of issue 21: the
// plugin name prefixes every key sent to the service and is known only at plugin start. A name longer
// than a key part holds (Istio's "<namespace>.<name>" reaches 317 bytes) is sent hashed, so its keys
// are ones the service accepts: the plugin starts (it was refused, its keys said to reach 600 bytes),
// and the service decides its global limit.
func TestAPluginNameOfThreeHundredBytesStartsAndItsGlobalLimitIsEnforced(t *testing.T) {
	clock := envoyhost.NewClock(epoch)
	svc := startService(t, clock)
	cfg := globalConfig(`{"name":"g","scope":"global","key":["client_ip"],"limits":[{"rate":"1/m"}]}`)
	p := load(t, module(t, "meshlimit"), cfg, 1, withService(svc, nil), func(c *envoyhost.Config) {
		c.Clock, c.PluginName = clock, strings.Repeat("n", 300)
	})
	assert.Equal(t, 200, status(roundTrip(t, p.VM(0), get("a.example", "/", "192.0.2.1"))), "the first request fits the limit")
	assert.Equal(t, 429, status(roundTrip(t, p.VM(0), get("a.example", "/", "192.0.2.1"))), "the service denies the second")
	assert.Equal(t, int64(2), svc.calls.Load(), "both were decided by the service")
	assert.Zero(t, counter(p, "meshlimit.global.failures"), "and it refused neither check")
}

var panicModule struct {
	once sync.Once
	wasm []byte
	err  error
}

// panicTestModule builds the filter with the meshlimit_panictest tag, whose only difference is a
// trigger that panics in the callback a request names (filter/testpanic_on.go).
func panicTestModule(t *testing.T) []byte {
	t.Helper()
	panicModule.once.Do(func() {
		_, file, _, _ := runtime.Caller(0)
		root := filepath.Join(filepath.Dir(file), "..")
		dir, err := os.MkdirTemp("", "meshlimit-panictest")
		if err != nil {
			panicModule.err = err
			return
		}
		defer os.RemoveAll(dir)
		out := filepath.Join(dir, "meshlimit.wasm")
		cmd := exec.Command("go", "build", "-buildmode=c-shared", "-tags", "tinygo meshlimit_panictest",
			"-gcflags=github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/internal=-complete=false", "-trimpath", "-o", out, "./cmd/filter")
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if panicModule.err = cmd.Run(); panicModule.err != nil {
			panicModule.err = &buildError{panicModule.err, stderr.String()}
			return
		}
		panicModule.wasm, panicModule.err = os.ReadFile(out)
	})
	require.NoError(t, panicModule.err)
	return panicModule.wasm
}

type buildError struct {
	err    error
	stderr string
}

func (e *buildError) Error() string { return e.err.Error() + "\n" + e.stderr }

func panicking(req *envoyhost.Request, where string) *envoyhost.Request {
	req.Headers = append(req.Headers, [2]string{"x-meshlimit-test-panic", where})
	return req
}

// TestAPanicInACallbackAppliesTheRulesFailureModeAndLimitingGoesOn is finding 9: a panic in any callback
// is recovered (the worker's VM does not fail, so Envoy's fail strategy never comes into play), counted,
// logged once per worker, and the request gets the rule's failure_mode; the next requests are limited
// exactly as before.
func TestAPanicInACallbackAppliesTheRulesFailureModeAndLimitingGoesOn(t *testing.T) {
	wasm := panicTestModule(t)
	for _, tc := range []struct {
		name, where, mode, scope string
		want                     int
	}{
		{"a panic deciding a fail-closed local rule denies the request", "request-headers", "deny", "local", 429},
		{"a panic deciding a fail-open local rule lets it through", "request-headers", "allow", "local", 200},
		{"a panic reading the service's answer for a fail-closed rule denies", "service-answer", "deny", "global", 429},
		{"a panic reading the service's answer for a fail-open rule resumes", "service-answer", "allow", "global", 200},
		{"a panic adding the quota fields to the response lets the response through", "response-headers", "deny", "local", 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := envoyhost.NewClock(epoch)
			svc := startService(t, clock)
			scope := ""
			if tc.scope == "global" {
				scope = `"scope":"global",`
			}
			p := load(t, wasm, globalConfig(`{"name":"r",`+scope+`"key":["client_ip"],"limits":[{"rate":"3/m"}],"failure_mode":"`+tc.mode+`"}`),
				2, withService(svc, nil), func(c *envoyhost.Config) { c.Clock = clock })
			ok := &envoyhost.Response{Headers: envoyhost.Headers{{":status", "200"}}}
			if tc.where == "response-headers" {
				ok.Headers = append(ok.Headers, [2]string{"x-meshlimit-test-panic", tc.where})
			}
			for i := range 4 { // two panics per worker
				ctx, cancel := context.WithTimeout(context.Background(), patience)
				res, err := p.VM(i%2).RoundTrip(ctx, panicking(get("a.example", "/", "192.0.2.10"+strconv.Itoa(i)), tc.where), ok)
				cancel()
				require.NoError(t, err)
				assert.Equal(t, tc.want, status(res), "request %d", i)
			}
			assert.Equal(t, int64(4), counter(p, "meshlimit.panics"))
			assert.Equal(t, 2, countLogs(p, envoyhost.LogCritical, "recovered from a panic"), "logged once per worker")
			for _, vm := range p.VMs() {
				require.NoError(t, vm.Failed(), "the VM survives: Envoy's fail strategy never applies")
			}
			var codes []int
			for i := range 4 {
				codes = append(codes, status(roundTrip(t, p.VM(i%2), get("a.example", "/", "192.0.2.91"))))
			}
			assert.Equal(t, []int{200, 200, 200, 429}, codes, "another client is limited exactly as before")
		})
	}
}

// TestAPanicInATickIsRecoveredAndHeldRequestsAreStillReleased: the timer callback recovers too, and the
// next tick releases what a leaky bucket holds.
func TestAPanicInATickIsRecoveredAndHeldRequestsAreStillReleased(t *testing.T) {
	p := load(t, panicTestModule(t), `{"rules":[{"name":"shape","key":["client_ip"],
		"limits":[{"rate":"10/s","algorithm":"leaky_bucket","burst":3}]}]}`, 1)
	vm := p.VM(0)
	first, act := send(t, vm, panicking(get("a.example", "/", "192.0.2.92"), "tick"))
	require.Equal(t, envoyhost.ActionContinue, act)
	_ = first
	held, act := send(t, vm, get("a.example", "/", "192.0.2.92"))
	require.Equal(t, envoyhost.ActionPause, act, "held for 100 ms")
	p.Clock().Advance(5 * time.Millisecond) // the tick that panics
	assert.Equal(t, int64(1), counter(p, "meshlimit.panics"))
	require.NoError(t, vm.Failed())
	p.Clock().Advance(100 * time.Millisecond)
	assert.Equal(t, envoyhost.ActionContinue, wait(t, held), "released by a later tick")
}

// TestADenialReportsTheOtherLimitsAsTheyWereAndTIsWhenMoreQuotaComes is finding 10 of issue 10 on the
// compiled module: t is the effective window, the seconds within which the client can use no more
// than the available quota (draft-ietf-httpapi-ratelimit-headers-11, §4.1.2: for a bucket, until its
// next unit), and a request denied by one limit reports the others uncharged: the hourly limit says
// r=98;t=36 on the allowed request and on the denial alike (it said t=72, then r=98;t=108).
func TestADenialReportsTheOtherLimitsAsTheyWereAndTIsWhenMoreQuotaComes(t *testing.T) {
	p := load(t, module(t, "meshlimit"), `{"rules":[
		{"name":"api","key":["client_ip"],"limits":[{"name":"burst","rate":"2/m"},{"name":"hourly","rate":"100/h"}]},
		{"name":"big","key":["client_ip"],"match":{"path":{"prefix":"/big"}},"limits":[{"name":"big","rate":"100/m"}]}]}`, 2)
	field := func(res envoyhost.Result) string {
		h := res.Downstream
		if res.LocalReply != nil {
			h = res.LocalReply.Headers
		}
		v, _ := h.Get("ratelimit")
		return v
	}
	roundTrip(t, p.VM(0), get("a.example", "/", "192.0.2.95"))
	allowed := roundTrip(t, p.VM(1), get("a.example", "/", "192.0.2.95"))
	assert.Equal(t, `"burst";r=0;t=30, "hourly";r=98;t=36`, field(allowed))
	denied := roundTrip(t, p.VM(0), get("a.example", "/big", "192.0.2.95"))
	require.NotNil(t, denied.LocalReply)
	assert.Equal(t, `"burst";r=0;t=30, "hourly";r=98;t=36`, field(denied), "the denial reports hourly as the allowed request did; big is never reached")

	first := roundTrip(t, p.VM(1), get("a.example", "/big", "192.0.2.96"))
	assert.Equal(t, `"burst";r=1;t=30, "hourly";r=99;t=36, "big";r=99;t=1`, field(first), "t is the next unit of each bucket: 30 s, 36 s, 0.6 s")
}

// TestALeaseTheServiceRefusesIsNotAnOutageEither: a refused lease batch (4xx) is counted as rejected
// and leaves the breaker closed, like a refused check.
func TestALeaseTheServiceRefusesIsNotAnOutageEither(t *testing.T) {
	clock := envoyhost.NewClock(epoch)
	var calls atomic.Int64
	p := load(t, module(t, "meshlimit"), globalConfig(`{"name":"g","scope":"global","key":["client_ip"],
		"limits":[{"rate":"100/s"}],"lease":{"batch":10}}`), 2, toCluster(answering(t, 400, `{"error":{"message":"refused"}}`, 0, &calls), clock))
	for i := range 6 {
		assert.Equal(t, 200, status(roundTrip(t, p.VM(i%2), get("a.example", "/", "192.0.2.83"))), "failure_mode allow")
		clock.Advance(25 * time.Millisecond) // a tick: the workers ask for a lease
		require.Eventually(t, func() bool {
			return counter(p, "meshlimit.global.lease_calls") == counter(p, "meshlimit.global.rejected")-int64(i+1)
		},
			patience, time.Millisecond, "every lease call was answered")
	}
	assert.Positive(t, counter(p, "meshlimit.global.lease_calls"))
	assert.Zero(t, counter(p, "meshlimit.global.failures"))
	assert.Zero(t, counter(p, "meshlimit.global.breaker_opened"))
}
