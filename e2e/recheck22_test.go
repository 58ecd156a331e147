package e2e

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/internal/envoyhost"
)

// Recheck of attack 22's "served" fix, against the compiled module (ATTACK_WASM).

type r22Step struct {
	early    bool   // the upstream answers before the body
	status   string // the answer's status
	extra    envoyhost.Headers
	body     string
	trailers bool // the body ends with trailers, not end of stream
}

// r22Send sends POST /login from ip through vm per st, and reports whether it was denied at the
// headers and whether the answer reached the client.
func r22Send(t *testing.T, p *envoyhost.Plugin, vm int, ip string, st r22Step) (headerDenied, answered bool) {
	t.Helper()
	s, ctx := postLoginHeaders(t, p, vm, ip)
	if s.LocalReply() != nil {
		_ = s.Close()
		settle(t, p)
		return true, false
	}
	resp := append(envoyhost.Headers{{":status", st.status}}, st.extra...)
	sendBody := func() {
		if st.trailers {
			_, _ = s.SendRequestBody([]byte(st.body), false)
			_, _ = s.SendRequestTrailers(envoyhost.Headers{{"x-t", "1"}})
		} else {
			_, _ = s.SendRequestBody([]byte(st.body), true)
		}
		_, _ = s.Wait(ctx)
	}
	if st.early {
		_, err := s.SendResponseHeaders(resp, false)
		require.NoError(t, err)
		_, _ = s.SendResponseBody([]byte("the-answer"), false)
		answered = strings.Contains(string(s.DownstreamBody()), "the-answer")
		settle(t, p)
		sendBody()
		_, _ = s.SendResponseBody([]byte("-rest"), true)
	} else {
		sendBody()
		if s.LocalReply() == nil && !s.Reset() {
			_, _ = s.SendResponseHeaders(resp, false)
			_, _ = s.SendResponseBody([]byte("the-answer"), true)
			answered = strings.Contains(string(s.DownstreamBody()), "the-answer")
		}
	}
	_ = s.Close()
	settle(t, p)
	return false, answered
}

const r22Deny = `{"max_tokens":1000}`

func TestR22AServedRequestEndedByTrailersIsNotGivenBack(t *testing.T) {
	for _, rules := range []string{
		a22PerIP + "," + a22Budget,
		a22PerIP + "," + strings.Replace(a22Budget, `"name":"budget",`, `"name":"budget","scope":"global",`, 1),
	} {
		clock := envoyhost.NewClock(epoch)
		svc := startSpy(t, clock)
		p := load(t, attackModule(t), globalConfig(rules), 2, svc.withIt(clock))
		served := 0
		for i := range 20 {
			if _, a := r22Send(t, p, i%2, "198.51.100.7", r22Step{early: true, status: "200", body: r22Deny, trailers: true}); a {
				served++
			}
		}
		n, _ := svc.undos()
		t.Logf("trailers: served %d of 20; given_back %d; undo calls %d", served, counter(p, "meshlimit.rule.per-ip.given_back"), n)
		assert.Equal(t, 1, served)
		assert.Zero(t, counter(p, "meshlimit.rule.per-ip.given_back"))
	}
}

func TestR22ACountOnRuleCountsAServedAnswerWhoseBodyIsDenied(t *testing.T) {
	clock := envoyhost.NewClock(epoch)
	svc := startSpy(t, clock)
	p := load(t, attackModule(t), globalConfig(a22Login+","+a22Budget), 2, svc.withIt(clock))
	answered := 0
	for i := range 20 {
		if _, a := r22Send(t, p, i%2, "198.51.100.8", r22Step{early: true, status: "401", body: r22Deny}); a {
			answered++
		}
	}
	n, _ := svc.undos()
	t.Logf("count_on 401 (5/m): answered %d of 20; login.given_back %d; undo calls %d", answered, counter(p, "meshlimit.rule.login.given_back"), n)
	assert.Equal(t, 5, answered)
	assert.Zero(t, counter(p, "meshlimit.rule.login.given_back"))
}

// A settling rule reserves 600 of 1000/m; the answer says 500 were used; the body is then denied.
// Given back, the next request (reserving 600) would be admitted; kept, it is denied.
const r22Res = `{"name":"res","match":{"path":{"exact":"/login"}},"key":["client_ip"],"limits":[{"rate":"1000/m"}],
	"cost":{"default":600,"settle":{"response_header":"x-used"}}}`

func TestR22ASettlingRulesReservationOfAServedRequestIsNotRefunded(t *testing.T) {
	for _, scope := range []string{"local", "global"} {
		rules := r22Res + "," + a22Budget
		if scope == "global" {
			rules = strings.Replace(r22Res, `"name":"res",`, `"name":"res","scope":"global",`, 1) + "," + a22Budget
		}
		clock := envoyhost.NewClock(epoch)
		svc := startSpy(t, clock)
		p := load(t, attackModule(t), globalConfig(rules), 2, svc.withIt(clock))
		used := envoyhost.Headers{{"x-used", "500"}}
		hd, a := r22Send(t, p, 0, "198.51.100.9", r22Step{early: true, status: "200", extra: used, body: r22Deny})
		require.False(t, hd)
		hd2, _ := r22Send(t, p, 1, "198.51.100.9", r22Step{early: false, status: "200", extra: used, body: `{"max_tokens":1}`})
		t.Logf("%s: first answered %v; second denied at headers %v; res.given_back %d settle_refund %d settled %d", scope, a,
			hd2, counter(p, "meshlimit.rule.res.given_back"), counter(p, "meshlimit.rule.res.settle_refund"), counter(p, "meshlimit.rule.res.settled"))
		assert.True(t, hd2, "%s: the served request's 500 (of a 600 reservation) is kept", scope)
	}
}

// An honest request denied at the body stage before any answer gives back (unchanged), also on a
// VM whose previous stream was served then denied (no "served" carried by a recycled context).
func TestR22AnHonestBodyDenialBeforeAnyAnswerStillGivesBackAfterAServedOne(t *testing.T) {
	for _, rules := range []string{
		a22PerIP + "," + a22Budget,
		a22PerIP + "," + strings.Replace(a22Budget, `"name":"budget",`, `"name":"budget","scope":"global",`, 1),
		strings.Replace(a22PerIP, `"scope":"global",`, "", 1) + "," + a22Budget,
	} {
		clock := envoyhost.NewClock(epoch)
		svc := startSpy(t, clock)
		p := load(t, attackModule(t), globalConfig(rules), 1, svc.withIt(clock))
		for round := range 3 {
			attacker := "203.0.113." + string(rune('1'+round))
			hd, a := r22Send(t, p, 0, attacker, r22Step{early: true, status: "200", body: r22Deny})
			require.False(t, hd)
			require.True(t, a)
			before := counter(p, "meshlimit.rule.per-ip.given_back")
			honest := "192.0.2." + string(rune('1'+round))
			for i := range 5 { // denied at the body 5 times, before any answer: each given back
				hd, a := r22Send(t, p, 0, honest, r22Step{early: false, status: "200", body: r22Deny, trailers: i%2 == 1})
				assert.False(t, hd, "round %d try %d: the honest address is never spent by its denials", round, i)
				assert.False(t, a)
			}
			hd, a = r22Send(t, p, 0, honest, r22Step{status: "200", body: `{"max_tokens":1}`})
			assert.False(t, hd)
			assert.True(t, a, "round %d: the honest address still has its 1/m", round)
			t.Logf("round %d: given_back +%d", round, counter(p, "meshlimit.rule.per-ip.given_back")-before)
			assert.Equal(t, int64(5), counter(p, "meshlimit.rule.per-ip.given_back")-before)
		}
	}
}

// The upstream's answer arrives while the body-stage call of a global budget is out (held by
// the service until the answer is in); the call then denies: the request was served.
func TestR22AnAnswerThatArrivesWhileTheBodyCallIsOutMakesTheRequestServed(t *testing.T) {
	rules := a22PerIP + "," + strings.Replace(a22Budget, `"name":"budget",`, `"name":"budget","scope":"global",`, 1)
	clock := envoyhost.NewClock(epoch)
	svc := startSpy(t, clock)
	p := load(t, attackModule(t), globalConfig(rules), 2, svc.withIt(clock))
	served := 0
	for i := range 10 {
		hold := make(chan struct{})
		svc.mu.Lock()
		svc.fail = func(body string) bool {
			if strings.Contains(body, "budget") {
				<-hold
			}
			return false
		}
		svc.mu.Unlock()
		s := p.VM(i % 2).NewStream(envoyhost.StreamInfo{SourceAddress: "198.51.100.10:4000"})
		h := envoyhost.Headers{{":method", "POST"}, {":path", "/login"}, {":authority", "app.example"}, {":scheme", "http"}, {"content-type", "application/json"}}
		_, err := s.SendRequestHeaders(h, false)
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(context.Background(), patience)
		_, err = s.Wait(ctx)
		require.NoError(t, err)
		if s.LocalReply() == nil {
			_, _ = s.SendRequestBody([]byte(r22Deny), true)
			eventually(t, "the body call is out", func() bool { return p.CallsInFlight() > 0 })
			_, _ = s.SendResponseHeaders(envoyhost.Headers{{":status", "200"}}, false)
			_, _ = s.SendResponseBody([]byte("the-answer"), true)
			close(hold)
			_, _ = s.Wait(ctx)
			if strings.Contains(string(s.DownstreamBody()), "the-answer") {
				served++
			}
		} else {
			close(hold)
		}
		cancel()
		_ = s.Close()
		settle(t, p)
	}
	t.Logf("answer during the body call: reached the client %d of 10; per-ip.given_back %d", served, counter(p, "meshlimit.rule.per-ip.given_back"))
	assert.LessOrEqual(t, served, 1)
}
