package e2e

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
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
	"github.com/meshlimit/meshlimit/wire"
)

// The filter keeps a stream's count_on keys and reservation keys in buffers its context reuses, reads
// response headers into one plugin-wide buffer, and recycles contexts (with those buffers) for the
// next streams, also in a plugin with a global section. These tests interleave many streams on one
// VM, and on several, so that every buffer is reused while other streams are paused on it: each
// key must end up with exactly what its own responses earned.

// job is one request of an interleaving: its request headers and the upstream's answer.
type job struct {
	req  envoyhost.Headers
	info envoyhost.StreamInfo
	resp envoyhost.Headers
}

// inflight is a started job: responded once its response headers were sent.
type inflight struct {
	s         *envoyhost.Stream
	job       job
	responded bool
}

// interleave runs jobs in a seeded random interleaving over the VMs: at each step it starts the next
// job (on the next VM in turn), answers a started one, or ends an answered one, so that streams
// start and end while up to maxOpen others are open. Every request must be admitted (the jobs are
// chosen so that none is denied); a response paused for the service is waited for.
func interleave(t *testing.T, vms []*envoyhost.VM, jobs []job, seed uint64, maxOpen int) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	rng.Shuffle(len(jobs), func(i, j int) { jobs[i], jobs[j] = jobs[j], jobs[i] })
	var open []*inflight
	next := 0
	for next < len(jobs) || len(open) > 0 {
		if next < len(jobs) && (len(open) == 0 || (len(open) < maxOpen && rng.IntN(2) == 0)) {
			j := jobs[next]
			s := vms[next%len(vms)].NewStream(j.info)
			t.Cleanup(func() { _ = s.Close() })
			act, err := s.SendRequestHeaders(j.req, true)
			require.NoError(t, err)
			require.Equal(t, envoyhost.ActionContinue, wait(t, s), "job %d (%v) is admitted (action %v)", next, j.req, act)
			open = append(open, &inflight{s: s, job: j})
			next++
			continue
		}
		i := rng.IntN(len(open))
		f := open[i]
		if !f.responded {
			_, err := f.s.SendResponseHeaders(f.job.resp, true)
			require.NoError(t, err)
			require.Equal(t, envoyhost.ActionContinue, wait(t, f.s), "the response goes on")
			f.responded = true
			continue
		}
		require.NoError(t, f.s.Close())
		open[i] = open[len(open)-1]
		open = open[:len(open)-1]
	}
}

// exchange runs one request through vm, answered by the upstream with resp.
func exchange(t *testing.T, vm *envoyhost.VM, req *envoyhost.Request, resp envoyhost.Headers) envoyhost.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	res, err := vm.RoundTrip(ctx, req, &envoyhost.Response{Headers: resp})
	require.NoError(t, err)
	return res
}

// ipInfo is the stream info of a client at ip.
func ipInfo(ip string) envoyhost.StreamInfo {
	return envoyhost.StreamInfo{SourceAddress: ip + ":40000"}
}

func loginHeaders(extra ...[2]string) envoyhost.Headers {
	return append(envoyhost.Headers{{":method", "POST"}, {":path", "/login"}, {":authority", "app.example"}}, extra...)
}

// TestManyInterleavedCountedKeysEachGetExactlyThePenaltyTheirOwnResponsesEarned: count_on with two
// conditions on two different response headers (read one after the other into the one scratch
// buffer), 45 keys whose three responses each are counted three times (penalized), twice (not yet),
// or never (each answer matching only one condition, or none), interleaved with up to 70 streams
// open on one VM and on three.
func TestManyInterleavedCountedKeysEachGetExactlyThePenaltyTheirOwnResponsesEarned(t *testing.T) {
	cfg := `{"rules":[{"name":"login","key":["client_ip"],"limits":[{"rate":"3/m"}],
		"count_on":{"status":["401"],"headers":[{"name":"x-auth-result","exact":"failed-password"},
		{"name":"x-attempt","exact":"pw"}],"penalty":"15m"}}]}`
	counted := envoyhost.Headers{{":status", "401"}, {"x-auth-result", "failed-password"}, {"x-attempt", "pw"}}
	firstOnly := envoyhost.Headers{{":status", "401"}, {"x-auth-result", "failed-password"}, {"x-attempt", "token-of-a-longer-kind"}}
	secondOnly := envoyhost.Headers{{":status", "401"}, {"x-auth-result", "ok"}, {"x-attempt", "pw"}}
	swapped := envoyhost.Headers{{":status", "401"}, {"x-auth-result", "pw"}, {"x-attempt", "failed-password"}}
	for _, c := range []struct {
		name    string
		workers int
	}{{"on one VM", 1}, {"on three workers", 3}} {
		t.Run(c.name, func(t *testing.T) {
			clock := envoyhost.NewClock(epoch)
			p := load(t, module(t, "meshlimit"), cfg, c.workers, func(cf *envoyhost.Config) { cf.Clock = clock })
			var jobs []job
			ip := func(i int) string { return fmt.Sprintf("198.51.100.%d", i+1) }
			for i := range 45 {
				answers := [][]envoyhost.Headers{
					{counted, counted, counted},
					{counted, firstOnly, counted},
					{firstOnly, secondOnly, swapped},
				}[i%3]
				for _, a := range answers {
					jobs = append(jobs, job{req: loginHeaders(), info: ipInfo(ip(i)), resp: a})
				}
			}
			interleave(t, p.VMs(), jobs, uint64(c.workers), 70)
			assert.Equal(t, int64(15*3+15*2), counter(p, "meshlimit.rule.login.counted"))
			assert.Equal(t, int64(15), counter(p, "meshlimit.rule.login.penalties"))
			for i := range 45 {
				s, act := send(t, p.VM(i%c.workers), &envoyhost.Request{Headers: loginHeaders(), Info: ipInfo(ip(i))})
				if i%3 == 0 {
					require.Equal(t, envoyhost.ActionStop, act, "%s: three counted responses of its own", ip(i))
					retry, _ := s.LocalReply().Headers.Get("retry-after")
					assert.Equal(t, "900", retry, "%s waits out the penalty", ip(i))
					continue
				}
				assert.Equal(t, envoyhost.ActionContinue, act, "%s: at most two counted responses of its own", ip(i))
			}
		})
	}
}

// TestInterleavedSettlesOfManyUsersLeaveEachUserExactlyItsOwnUsage: two rules settle each request
// from two different response headers (read into the one scratch buffer one after the other), their
// keys kept in the contexts' reused settlings; 16 users' requests interleave on one VM and on two,
// and each user's remaining quota in both is exactly the limit less what its own answers said.
func TestInterleavedSettlesOfManyUsersLeaveEachUserExactlyItsOwnUsage(t *testing.T) {
	cfg := `{"rules":[
		{"name":"tokens","key":[{"header":"x-user"}],"limits":[{"rate":"100000/d"}],
		 "cost":{"default":50,"settle":{"response_header":"x-tokens-used"}}},
		{"name":"bytes","key":[{"header":"x-tenant"},{"header":"x-user"}],"limits":[{"rate":"100000/d"}],
		 "cost":{"default":70,"settle":{"response_header":"x-bytes-used"}}}]}`
	user := func(u int) string { return "user-" + strings.Repeat("u", u%5) + strconv.Itoa(u) }
	tokens := func(u, j int) int64 { return int64((u+1)*10 + j) }
	bytes := func(u, j int) int64 { return int64((u+1)*7 + j*3) }
	for _, c := range []struct {
		name    string
		workers int
	}{{"on one VM", 1}, {"on two workers", 2}} {
		t.Run(c.name, func(t *testing.T) {
			clock := envoyhost.NewClock(epoch)
			p := load(t, module(t, "meshlimit"), cfg, c.workers, func(cf *envoyhost.Config) { cf.Clock = clock })
			var jobs []job
			for u := range 16 {
				for j := range 6 {
					jobs = append(jobs, job{
						req:  envoyhost.Headers{{":method", "GET"}, {":path", "/"}, {":authority", "a.test"}, {"x-user", user(u)}, {"x-tenant", "t" + strconv.Itoa(u%3)}},
						resp: envoyhost.Headers{{":status", "200"}, {"x-tokens-used", strconv.FormatInt(tokens(u, j), 10)}, {"x-bytes-used", strconv.FormatInt(bytes(u, j), 10)}},
					})
				}
			}
			interleave(t, p.VMs(), jobs, 7+uint64(c.workers), 40)
			assert.Equal(t, int64(2*16*6), counter(p, "meshlimit.rule.tokens.settled")+counter(p, "meshlimit.rule.bytes.settled"))
			for u := range 16 {
				var usedTokens, usedBytes int64
				for j := range 6 {
					usedTokens += tokens(u, j)
					usedBytes += bytes(u, j)
				}
				s, act := send(t, p.VM(u%c.workers), &envoyhost.Request{Headers: envoyhost.Headers{{":method", "GET"}, {":path", "/"},
					{":authority", "a.test"}, {"x-user", user(u)}, {"x-tenant", "t" + strconv.Itoa(u%3)}}})
				require.Equal(t, envoyhost.ActionContinue, act)
				_, err := s.SendResponseHeaders(envoyhost.Headers{{":status", "200"}, {"x-tokens-used", "50"}, {"x-bytes-used", "70"}}, true)
				require.NoError(t, err)
				leftTokens, err := remaining(s.DownstreamHeaders(), "tokens")
				require.NoError(t, err)
				leftBytes, err := remaining(s.DownstreamHeaders(), "bytes")
				require.NoError(t, err)
				assert.Equal(t, 100000-usedTokens-50, leftTokens, "%s's tokens: its own usage and its probe's reservation", user(u))
				assert.Equal(t, 100000-usedBytes-70, leftBytes, "%s's bytes", user(u))
			}
		})
	}
}

// TestAGlobalChargePausedOnTheServiceGoesToItsOwnKeyWhileOtherKeysStreamsStartAndEnd: the service
// answers each check 30ms late; while attackers' attempts wait for it (each charged there), other
// clients' streams (counted once, or not at all) start and end on the same worker and reuse its contexts
// and scratch buffers. Each attacker is penalized after its own two failures; no other client is.
func TestAGlobalChargePausedOnTheServiceGoesToItsOwnKeyWhileOtherKeysStreamsStartAndEnd(t *testing.T) {
	clock := envoyhost.NewClock(epoch)
	svc := startService(t, clock)
	svc.slow.Store(int64(30 * time.Millisecond))
	p := load(t, module(t, "meshlimit"), globalConfig(`{"name":"login","scope":"global","key":["client_ip"],
		"limits":[{"rate":"2/m"}],"count_on":{"status":["401"],"penalty":"15m"}}`),
		1, withService(svc, nil), func(c *envoyhost.Config) { c.Clock = clock })
	vm := p.VM(0)
	attacker := func(i int) string { return fmt.Sprintf("203.0.113.%d", i+1) }
	other := func(i int) string { return fmt.Sprintf("198.51.100.%d", i+1) }
	failed := envoyhost.Headers{{":status", "401"}, {"content-type", "text/plain"}}
	ok := envoyhost.Headers{{":status", "200"}, {"content-type", "text/plain"}}
	for round := range 2 {
		var paused []*envoyhost.Stream
		for a := range 6 {
			s, act := send(t, vm, &envoyhost.Request{Headers: loginHeaders(), Info: ipInfo(attacker(a))})
			require.Equal(t, envoyhost.ActionPause, act, "round %d: attacker %d's attempt waits for its check", round, a)
			paused = append(paused, s)
			for o := range 4 { // other clients come and go while the charges are out
				n := a*4 + o
				resp := ok
				if n%5 == 0 && round == 0 {
					resp = failed // one counted failure each: not a penalty
				}
				res := exchange(t, vm, &envoyhost.Request{Headers: loginHeaders(), Info: ipInfo(other(n))}, resp)
				require.Nil(t, res.LocalReply, "round %d: %s is admitted", round, other(n))
			}
		}
		for a, s := range paused {
			assert.Equal(t, envoyhost.ActionContinue, wait(t, s), "attacker %d's attempt goes on after its check", a)
			act, err := s.SendResponseHeaders(failed, true)
			require.NoError(t, err)
			require.Equal(t, envoyhost.ActionContinue, act, "its charge was made in the check")
			require.NoError(t, s.Close())
		}
	}
	for a := range 6 {
		s, act := send(t, vm, &envoyhost.Request{Headers: loginHeaders(), Info: ipInfo(attacker(a))})
		require.Equal(t, envoyhost.ActionStop, act, "attacker %d: two counted failures of its own", a)
		retry, _ := s.LocalReply().Headers.Get("retry-after")
		assert.Equal(t, "900", retry)
	}
	for n := range 24 {
		res := exchange(t, vm, &envoyhost.Request{Headers: loginHeaders(), Info: ipInfo(other(n))}, ok)
		assert.Nil(t, res.LocalReply, "%s was never penalized", other(n))
	}
	assert.Zero(t, counter(p, "meshlimit.global.failures"))
	assert.Equal(t, int64(6), counter(p, "meshlimit.rule.login.penalties"))
}

// TestOneResponseCountedByTwoGlobalRulesPenalizesBothKeysAndLeavesNoCallBehind: an attempt of two
// global counted rules (one keyed by the client, one by the user) is charged in both by its check;
// its counted response boxes each rule's own key, and nothing of the charge stays waiting: the next tick
// finds no call to give up on (no failure for the breaker, no second decision of the stream).
func TestOneResponseCountedByTwoGlobalRulesPenalizesBothKeysAndLeavesNoCallBehind(t *testing.T) {
	clock := envoyhost.NewClock(epoch)
	svc := startService(t, clock)
	p := load(t, module(t, "meshlimit"), globalConfig(`
		{"name":"by-ip","scope":"global","key":["client_ip"],"limits":[{"rate":"1/m"}],"count_on":{"status":["401"],"penalty":"15m"}},
		{"name":"by-user","scope":"global","key":[{"header":"x-user"}],"limits":[{"rate":"1/m"}],"count_on":{"status":["401"],"penalty":"10m"}}`),
		1, withService(svc, nil), func(c *envoyhost.Config) { c.Clock = clock })
	vm := p.VM(0)
	s, act := send(t, vm, &envoyhost.Request{Headers: loginHeaders([2]string{"x-user", "mallory"}), Info: ipInfo("203.0.113.7")})
	require.Equal(t, envoyhost.ActionPause, act, "the attempt waits for its check, which charges both rules")
	require.Equal(t, envoyhost.ActionContinue, wait(t, s))
	act, err := s.SendResponseHeaders(envoyhost.Headers{{":status", "401"}}, true)
	require.NoError(t, err)
	require.Equal(t, envoyhost.ActionContinue, act, "the counted response keeps the charges: nothing to wait for")
	require.Eventually(t, func() bool { return svc.calls.Load() >= 1 && p.CallsInFlight() == 0 }, patience, 5*time.Millisecond)
	clock.Advance(300 * time.Millisecond) // ticks past every deadline, with the stream still open
	assert.Zero(t, counter(p, "meshlimit.global.deadline_expired"), "no charge was left waiting")
	assert.Zero(t, counter(p, "meshlimit.global.failures"))
	assert.Zero(t, counter(p, "meshlimit.global.late_answers"))
	require.NoError(t, s.Close())
	assert.Equal(t, int64(2), counter(p, "meshlimit.rule.by-ip.penalties")+counter(p, "meshlimit.rule.by-user.penalties"))

	sameIP, act := send(t, vm, &envoyhost.Request{Headers: loginHeaders([2]string{"x-user", "alice"}), Info: ipInfo("203.0.113.7")})
	require.Equal(t, envoyhost.ActionStop, act, "the client is penalized by by-ip")
	retry, _ := sameIP.LocalReply().Headers.Get("retry-after")
	assert.Equal(t, "900", retry)
	sameUser, act := send(t, vm, &envoyhost.Request{Headers: loginHeaders([2]string{"x-user", "mallory"}), Info: ipInfo("198.51.100.7")})
	require.Equal(t, envoyhost.ActionStop, act, "the user is penalized by by-user")
	retry, _ = sameUser.LocalReply().Headers.Get("retry-after")
	assert.Equal(t, "600", retry)
	res := exchange(t, vm, &envoyhost.Request{Headers: loginHeaders([2]string{"x-user", "alice"}), Info: ipInfo("198.51.100.8")}, envoyhost.Headers{{":status", "200"}})
	assert.Nil(t, res.LocalReply, "another client and user are not")
	assert.NoError(t, vm.Failed())
}

// TestALateAnswerToAClosedStreamDecidesNoLaterStreamOnTheSameVM: the first stream's answer (a denial)
// comes after the filter's deadline; its stream was decided by failure_mode and closed. Many streams
// then start on the same VM (reusing recycled contexts), each checked and admitted by its own answer,
// some while the late denial arrives: none of them is denied.
func TestALateAnswerToAClosedStreamDecidesNoLaterStreamOnTheSameVM(t *testing.T) {
	clock := envoyhost.NewClock(epoch)
	var calls atomic.Int64
	deny := `{"allowed":false,"decisions":[{"allowed":false,"limit":1,"remaining":0,"reset_ms":1000,"retry_after_ms":1000}]}`
	allow := `{"allowed":true,"decisions":[{"allowed":true,"limit":1000,"remaining":999,"reset_ms":1000}]}`
	var gate atomic.Pointer[chan struct{}] // holds the first stream's answer until the test closes it
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == wire.ResetsPath { // the ticks' polls of the reset log are not checks
			w.WriteHeader(http.StatusNotFound)
			return
		}
		calls.Add(1)
		b, _ := io.ReadAll(r.Body)
		body := allow
		if strings.Contains(string(b), "192.0.2.81") { // the first stream's check
			select {
			case <-*gate.Load():
			case <-r.Context().Done():
				return
			}
			body = deny
		}
		w.Header().Set("content-type", "application/json")
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	for _, c := range []struct {
		name        string
		closeBefore bool // close the first stream before its late answer comes
	}{{"closed before the late answer", true}, {"closed after the late answer", false}} {
		t.Run(c.name, func(t *testing.T) {
			calls.Store(0)
			late := make(chan struct{})
			gate.Store(&late)
			defer func() {
				select {
				case <-late:
				default:
					close(late)
				}
			}()
			p := load(t, module(t, "meshlimit"), globalConfig(`{"name":"g","scope":"global","key":["client_ip"],"limits":[{"rate":"1000/s"}]}`),
				1, toCluster(strings.TrimPrefix(srv.URL, "http://"), clock), noCallTimeouts)
			vm := p.VM(0)
			first, act := send(t, vm, get("a.example", "/", "192.0.2.81"))
			require.Equal(t, envoyhost.ActionPause, act)
			clock.Advance(225 * time.Millisecond)
			require.Equal(t, envoyhost.ActionContinue, wait(t, first), "resumed at the deadline (failure_mode allow)")
			if c.closeBefore {
				require.NoError(t, first.Close())
			}
			close(late) // the denial comes after the deadline
			var open []*envoyhost.Stream
			for i := range 40 {
				s, act := send(t, vm, get("a.example", "/", fmt.Sprintf("192.0.2.%d", 100+i%20)))
				require.Equal(t, envoyhost.ActionPause, act)
				open = append(open, s)
				if len(open) == 5 || i == 39 {
					for _, s := range open {
						require.Equal(t, envoyhost.ActionContinue, wait(t, s), "stream %d is admitted by its own answer", i)
						assert.Nil(t, s.LocalReply())
						_, err := s.SendResponseHeaders(envoyhost.Headers{{":status", "200"}}, true)
						require.NoError(t, err)
						require.NoError(t, s.Close())
					}
					open = open[:0]
				}
				if i == 10 {
					settle(t, p) // the late denial arrived
				}
			}
			if !c.closeBefore {
				assert.Equal(t, int64(1), counter(p, "meshlimit.global.late_answers"))
				assert.Nil(t, first.LocalReply(), "the late denial is ignored")
				require.NoError(t, first.Close())
				for i := range 10 {
					res := roundTrip(t, vm, get("a.example", "/", fmt.Sprintf("192.0.2.%d", 200+i)))
					assert.Nil(t, res.LocalReply, "a stream on the context the first one left is admitted")
				}
			}
			want := int64(41)
			if !c.closeBefore {
				want += 10
			}
			assert.Equal(t, want, calls.Load(), "one call per stream")
			assert.Zero(t, counter(p, "meshlimit.rule.g.limited"), "no stream was denied")
			assert.NoError(t, vm.Failed())
		})
	}
}

// TestAStreamThatLeavesWhileItsCheckIsOutReleasesItsPermitAndIsChargedUnanswered: a request with a
// global concurrency limit and a global count_on rule leaves while its check is out. Its unanswered
// charge is a call of its own, which must not take the place of the check's items: the permit the
// check acquired is released when two call timeouts have passed, and the charge reaches the service.
func TestAStreamThatLeavesWhileItsCheckIsOutReleasesItsPermitAndIsChargedUnanswered(t *testing.T) {
	clock := envoyhost.NewClock(epoch)
	svc := startService(t, clock)
	cfg := globalConfig(`{"name":"login","scope":"global","key":["client_ip"],"limits":[{"rate":"100/m"}],"count_on":{"status":["401"]}},
		{"name":"gpu","scope":"global","key":[{"header":"x-tenant"}],"limits":[{"concurrency":1,"name":"gpu-slots"}]}`)
	p := load(t, module(t, "meshlimit"), cfg, 1, withService(svc, nil), func(c *envoyhost.Config) { c.Clock = clock })
	release := svc.hold()
	req := tenant("acme")
	s := p.VM(0).NewStream(req.Info)
	act, err := s.SendRequestHeaders(req.Headers, true)
	require.NoError(t, err)
	require.Equal(t, envoyhost.ActionPause, act, "paused on the check")
	require.NoError(t, s.Close()) // the client leaves before the answer; the service still acquires
	assert.Equal(t, int64(1), counter(p, "meshlimit.rule.login.unanswered"))
	eventually(t, "the check, which charges the attempt, reaches the service", func() bool { return svc.calls.Load() == 1 })
	release()
	settle(t, p)
	other, ok := openGlobal(t, p.VM(0), tenant("acme"))
	require.NoError(t, other.Close())
	assert.False(t, ok, "the gone stream's permit is held until its release is due")
	clock.Advance(500 * time.Millisecond) // two call timeouts: the tick sends the release
	require.Eventually(t, func() bool {
		s, ok := openGlobal(t, p.VM(0), tenant("acme"))
		require.NoError(t, s.Close())
		return ok
	}, patience, 20*time.Millisecond, "the release frees the permit")
	assert.Zero(t, counter(p, "meshlimit.global.deadline_expired"))
	assert.NoError(t, p.VM(0).Failed())
}
