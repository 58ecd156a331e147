package e2e

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/internal/envoyhost"
	"github.com/meshlimit/meshlimit/internal/redistest"
)

// loginRule counts failed logins (401) per client address: 5 a minute, then 15 minutes in the
// penalty box.
const loginRule = `{"name":"login","match":{"path":{"exact":"/login"}},"key":["client_ip"],
	"limits":[{"name":"failed-logins","rate":"5/m"}],
	"count_on":{"status":["401","403"],"penalty":"15m"}%s}`

func loginConfig(extra string) string {
	return `{"response":{"explain_header":"x-meshlimit-rule"},"rules":[` + fmt.Sprintf(loginRule, extra) + `]}`
}

// answer is an upstream response of status with the given extra headers.
func answer(status int, headers ...[2]string) *envoyhost.Response {
	h := envoyhost.Headers{{":status", strconv.Itoa(status)}, {"content-type", "text/plain"}}
	return &envoyhost.Response{Headers: append(h, headers...), Body: []byte("upstream")}
}

// login sends POST /login from ip through vm, which the upstream answers with resp.
func login(t testing.TB, vm *envoyhost.VM, ip string, resp *envoyhost.Response, extra ...[2]string) envoyhost.Result {
	t.Helper()
	req := get("app.example", "/login", ip, extra...)
	req.Headers[0][1] = "POST"
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	res, err := vm.RoundTrip(ctx, req, resp)
	require.NoError(t, err)
	return res
}

func TestFiveFailedLoginsThenTheClientWaitsOutThePenaltyWhileOtherUsersLogIn(t *testing.T) {
	clock := envoyhost.NewClock(epoch)
	p := load(t, module(t, "meshlimit"), loginConfig(""), 2, func(c *envoyhost.Config) { c.Clock = clock })
	const attacker = "203.0.113.9"
	for i := range 5 {
		res := login(t, p.VM(i%2), attacker, answer(401))
		require.Nil(t, res.LocalReply, "failed login %d reaches the upstream", i+1)
	}
	blocked := login(t, p.VM(0), attacker, answer(200))
	require.NotNil(t, blocked.LocalReply, "the sixth attempt is answered by the proxy")
	assert.Equal(t, 429, blocked.LocalReply.Status)
	assert.Nil(t, blocked.Upstream, "and never reaches the upstream")
	retry, _ := blocked.LocalReply.Headers.Get("retry-after")
	assert.Equal(t, "900", retry, "the client is told to wait out the penalty")
	rule, _ := blocked.LocalReply.Headers.Get("x-meshlimit-rule")
	assert.Equal(t, "login", rule, "the explain header names the rule")
	assert.Equal(t, "login", blocked.FilterState["wasm.meshlimit.rule"])
	assert.Equal(t, "failed-logins", blocked.FilterState["wasm.meshlimit.limit"])
	assert.Len(t, blocked.FilterState["wasm.meshlimit.key_hash"], 16)
	assert.NotContains(t, blocked.FilterState["wasm.meshlimit.key_hash"], attacker)

	for i := range 20 {
		user := fmt.Sprintf("198.51.100.%d", i+1)
		res := login(t, p.VM(i%2), user, answer(200))
		assert.Nil(t, res.LocalReply, "%s logs in", user)
		assert.Nil(t, res.FilterState, "an admitted request carries no explanation")
	}
	assert.Nil(t, login(t, p.VM(1), "198.51.100.1", answer(401)).LocalReply, "another user's failure is theirs alone")

	clock.Advance(14 * time.Minute) // the limit itself refilled long ago
	assert.Equal(t, 429, status(login(t, p.VM(1), attacker, answer(200))), "the penalty outlasts the limit")
	clock.Advance(time.Minute + time.Second)
	assert.Nil(t, login(t, p.VM(1), attacker, answer(200)).LocalReply, "after the penalty the client may try again")

	assert.Equal(t, int64(6), counter(p, "meshlimit.rule.login.counted"))
	assert.Equal(t, int64(1), counter(p, "meshlimit.rule.login.penalties"))
	assert.Equal(t, int64(2), counter(p, "meshlimit.rule.login.penalty_denied"))
	assert.Zero(t, p.PollOneoffCalls())
}

func TestSuccessfulResponsesAreNeverCharged(t *testing.T) {
	p := load(t, module(t, "meshlimit"), loginConfig(""), 1)
	for range 50 {
		require.Nil(t, login(t, p.VM(0), "192.0.2.1", answer(200)).LocalReply)
	}
	for i := range 5 {
		require.Nil(t, login(t, p.VM(0), "192.0.2.1", answer(403)).LocalReply, "failure %d still has its quota", i+1)
	}
	assert.Equal(t, 429, status(login(t, p.VM(0), "192.0.2.1", answer(200))))
}

func TestAClientThatLeavesBeforeTheResponseIsChargedAsAFailure(t *testing.T) {
	for _, tc := range []struct {
		name, extra string
		wantStatus  int
	}{
		{"by default", "", 429},
		{"unless count_unanswered is false", `,"count_on":{"status":["401"],"penalty":"15m","count_unanswered":false}`, 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := loginConfig("")
			if tc.extra != "" {
				cfg = `{"rules":[{"name":"login","match":{"path":{"exact":"/login"}},"key":["client_ip"],
					"limits":[{"name":"failed-logins","rate":"5/m"}]` + tc.extra + `}]}`
			}
			p := load(t, module(t, "meshlimit"), cfg, 1)
			for range 5 {
				s := p.VM(0).NewStream(envoyhost.StreamInfo{SourceAddress: "192.0.2.7:40000"})
				act, err := s.SendRequestHeaders(envoyhost.Headers{{":method", "POST"}, {":path", "/login"}, {":authority", "app.example"}}, true)
				require.NoError(t, err)
				require.Equal(t, envoyhost.ActionContinue, act)
				require.NoError(t, s.Close(), "the client resets the stream before any response")
			}
			assert.Equal(t, tc.wantStatus, status(login(t, p.VM(0), "192.0.2.7", answer(200))))
		})
	}
}

func TestAnAttackerForgingTheVictimsAddressBlocksOnlyItself(t *testing.T) {
	p := load(t, module(t, "meshlimit"), loginConfig(""), 1)
	const victim = "198.51.100.20"
	for range 10 {
		login(t, p.VM(0), "203.0.113.9", answer(401), [2]string{"x-forwarded-for", victim}, [2]string{"x-real-ip", victim})
	}
	assert.Equal(t, 429, status(login(t, p.VM(0), "203.0.113.9", answer(200))))
	assert.Nil(t, login(t, p.VM(0), victim, answer(200)).LocalReply, "the key is the connection's address: the victim is untouched")
}

func TestTheProxysOwnDenialIsNotChargedAgain(t *testing.T) {
	// A request another rule denies gets the proxy's 429, which passes through the filter's response
	// path: counting it would let a volume limit feed the failed-login count.
	cfg := `{"rules":[{"name":"login","key":["client_ip"],"limits":[{"rate":"5/m"}],"count_on":{"status":["4xx"]}},
		{"name":"volume","key":["client_ip"],"limits":[{"rate":"2/h"}]}]}`
	p := load(t, module(t, "meshlimit"), cfg, 1)
	for range 6 {
		login(t, p.VM(0), "192.0.2.3", answer(200))
	}
	assert.Equal(t, int64(0), counter(p, "meshlimit.rule.login.counted"), "four 429s of the volume rule, none charged")
}

func TestResponseHeaderConditionsDecideWhatCounts(t *testing.T) {
	cfg := `{"rules":[{"name":"upstream-says","key":["client_ip"],"limits":[{"rate":"2/m"}],
		"count_on":{"headers":[{"name":"x-auth-result","exact":"fail"}]}}]}`
	p := load(t, module(t, "meshlimit"), cfg, 1)
	ip := "192.0.2.4"
	for range 5 {
		require.Nil(t, login(t, p.VM(0), ip, answer(401, [2]string{"x-auth-result", "ok"})).LocalReply, "the header does not match")
	}
	for range 2 {
		require.Nil(t, login(t, p.VM(0), ip, answer(200, [2]string{"x-auth-result", "fail"})).LocalReply)
	}
	res := login(t, p.VM(0), ip, answer(200))
	assert.Equal(t, 429, status(res), "two matching responses exhaust the limit: without a penalty it blocks until it refills")
	r, _ := res.LocalReply.Headers.Get("retry-after")
	assert.Equal(t, "30", r)
}

func TestANearLimitDecisionIsCountedPerRule(t *testing.T) {
	p := load(t, module(t, "meshlimit"), `{"rules":[{"name":"api","key":["client_ip"],"limits":[{"rate":"20/m"}]}]}`, 1)
	for range 17 {
		roundTrip(t, p.VM(0), get("a.example", "/", "192.0.2.5"))
	}
	assert.Zero(t, counter(p, "meshlimit.rule.api.near_limit"), "3 of 20 left is not below a tenth")
	roundTrip(t, p.VM(0), get("a.example", "/", "192.0.2.5"))
	roundTrip(t, p.VM(0), get("a.example", "/", "192.0.2.5"))
	assert.Equal(t, int64(1), counter(p, "meshlimit.rule.api.near_limit"), "1 of 20 left is")
}

func TestADeniedRequestIsExplainedInTheDebugLog(t *testing.T) {
	cfg := `{"log_level":"debug","rules":[{"name":"api","key":["client_ip"],"limits":[{"name":"per-ip","rate":"1/m"}]}]}`
	p := load(t, module(t, "meshlimit"), cfg, 1, func(c *envoyhost.Config) { c.LogLevel = envoyhost.LogDebug })
	roundTrip(t, p.VM(0), get("a.example", "/", "192.0.2.6"))
	res := roundTrip(t, p.VM(0), get("a.example", "/", "192.0.2.6"))
	require.Equal(t, 429, status(res))
	_, has := res.LocalReply.Headers.Get("x-meshlimit-rule")
	assert.False(t, has, "no explain header unless configured")
	hash := res.FilterState["wasm.meshlimit.key_hash"]
	assert.True(t, logsContain(p, envoyhost.LogDebug, "denied by rule api, limit per-ip, key hash "+hash), "the log says what the filter state says")
}

func TestFailedLoginsAcrossProxiesAreCountedInRedisAndEachProxyKeepsThePenalty(t *testing.T) {
	r := redistest.Start(t)
	addr := startRedisService(t, r.Addr())
	cfg := `{"global":{"cluster":"` + serviceCluster + `","timeout":"500ms"},"response":{"explain_header":"x-meshlimit-rule"},
		"rules":[` + fmt.Sprintf(loginRule, `,"scope":"global"`) + `]}`
	var proxies []*envoyhost.Plugin
	for range 2 {
		proxies = append(proxies, load(t, module(t, "meshlimit"), cfg, 1, toReplica(addr)))
	}
	const attacker = "203.0.113.50"
	reached := 0
	for i := range 5 {
		res := login(t, proxies[i%2].VM(0), attacker, answer(401))
		require.Nil(t, res.LocalReply, "failed login %d reaches the upstream", i+1)
		reached++
	}
	// The fifth attempt exhausted the key in Redis on proxy 0, whose counted response boxes it there
	// at once. Proxy 1's next attempt is charged in its check: the service denies it.
	assert.Equal(t, 429, status(login(t, proxies[0].VM(0), attacker, answer(200))))
	if login(t, proxies[1].VM(0), attacker, answer(401)).LocalReply == nil {
		reached++
	}
	assert.Equal(t, 5, reached, "no more failures than the limit reach the upstream, whatever the proxies")
	for i, p := range proxies {
		res := login(t, p.VM(0), attacker, answer(200))
		require.Equal(t, 429, status(res), "proxy %d denies the key", i)
		rule, _ := res.LocalReply.Headers.Get("x-meshlimit-rule")
		assert.Equal(t, "login", rule)
		assert.Equal(t, "login", res.FilterState["wasm.meshlimit.rule"])
		assert.Nil(t, login(t, p.VM(0), "198.51.100.77", answer(200)).LocalReply, "other users log in on proxy %d", i)
		assert.Zero(t, counter(p, "meshlimit.global.failures"))
	}
}

func TestARequestTheServiceDeniesIsNotChargedByACountedRule(t *testing.T) {
	// The counted rule admits the request before the global rule's call: the service's denial must
	// drop the charge, or the proxy's own 429 would count as a failure.
	clock := envoyhost.NewClock(epoch)
	svc := startService(t, clock)
	p := load(t, module(t, "meshlimit"), globalConfig(`{"name":"login","key":["client_ip"],"limits":[{"rate":"5/m"}],"count_on":{"status":["4xx"]}},
		{"name":"volume","scope":"global","key":["client_ip"],"limits":[{"rate":"2/h"}]}`),
		1, withService(svc, nil), func(c *envoyhost.Config) { c.Clock = clock })
	for range 6 {
		login(t, p.VM(0), "192.0.2.8", answer(200))
	}
	assert.Equal(t, int64(4), counter(p, "meshlimit.rule.volume.limited"))
	assert.Zero(t, counter(p, "meshlimit.rule.login.counted"), "none of the four 429s was charged")
}

func TestANearLimitGlobalDecisionIsCountedToo(t *testing.T) {
	clock := envoyhost.NewClock(epoch)
	svc := startService(t, clock)
	p := load(t, module(t, "meshlimit"), globalConfig(`{"name":"api","scope":"global","key":["client_ip"],"limits":[{"rate":"20/m"}]}`),
		1, withService(svc, nil), func(c *envoyhost.Config) { c.Clock = clock })
	for range 18 {
		roundTrip(t, p.VM(0), get("a.example", "/", "192.0.2.9"))
	}
	assert.Zero(t, counter(p, "meshlimit.rule.api.near_limit"), "2 of 20 left is not below a tenth")
	roundTrip(t, p.VM(0), get("a.example", "/", "192.0.2.9"))
	assert.Equal(t, int64(1), counter(p, "meshlimit.rule.api.near_limit"), "1 of 20 left is")
}

func TestAGlobalClientThatLeavesBeforeTheResponseIsStillChargedInTheService(t *testing.T) {
	clock := envoyhost.NewClock(epoch)
	svc := startService(t, clock)
	p := load(t, module(t, "meshlimit"), globalConfig(fmt.Sprintf(loginRule, `,"scope":"global"`)),
		1, withService(svc, nil), func(c *envoyhost.Config) { c.Clock = clock })
	for range 5 {
		s := p.VM(0).NewStream(envoyhost.StreamInfo{SourceAddress: "192.0.2.10:40000"})
		_, err := s.SendRequestHeaders(envoyhost.Headers{{":method", "POST"}, {":path", "/login"}, {":authority", "app.example"}}, true)
		require.NoError(t, err)
		require.NoError(t, s.Close())
	}
	require.Eventually(t, func() bool { return svc.calls.Load() == 5 && p.CallsInFlight() == 0 }, patience, 5*time.Millisecond,
		"each reset stream's check, which charged it, reaches the service")
	assert.Equal(t, int64(5), counter(p, "meshlimit.rule.login.unanswered"))
	// This proxy never saw the answers (their streams were gone), and sent nothing more: the next
	// attempt's check is denied by the service's count of the five.
	assert.Equal(t, 429, status(login(t, p.VM(0), "192.0.2.10", answer(401))))
	assert.Equal(t, int64(6), svc.calls.Load(), "no second charge of the reset streams")
}

// BenchmarkCountedResponses measures one whole request on wazero for a rule charged on arrival and
// for the same rule with count_on, whose request path only checks (a read) and whose response path
// charges a matching response (the CAS write an ordinary rule makes on the request). Compare the
// three: the difference is the per-request cost of response counting.
func BenchmarkCountedResponses(b *testing.B) {
	const limits = `"key":["client_ip"],"limits":[{"rate":"1000000000/s"}]`
	for _, c := range []struct {
		name, rule string
		resp       *envoyhost.Response
	}{
		{"charged-on-arrival", `{"name":"r",` + limits + `}`, answer(200)},
		{"count_on-uncounted-200", `{"name":"r",` + limits + `,"count_on":{"status":["401"]}}`, answer(200)},
		{"count_on-counted-401", `{"name":"r",` + limits + `,"count_on":{"status":["401"],"penalty":"1m"}}`, answer(401)},
	} {
		b.Run(c.name, func(b *testing.B) {
			vm := load(b, module(b, "meshlimit"), `{"rules":[`+c.rule+`]}`, 1).VM(0)
			req := get("bench.example", "/login", "203.0.113.77")
			ctx := context.Background()
			for b.Loop() {
				if _, err := vm.RoundTrip(ctx, req, c.resp); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestACountedResponseNeverWaitsOnAServiceThatNeverAnswers: a global attempt's check pauses the
// request, and, when it charged nothing, the counted response's charge pauses the response; on a
// host whose callout timeout never fires, the filter's own deadline (timeout + 5ms, checked every
// 20ms tick) resumes each, uncharged.
func TestACountedResponseNeverWaitsOnAServiceThatNeverAnswers(t *testing.T) {
	clock := envoyhost.NewClock(epoch)
	p := load(t, module(t, "meshlimit"), globalConfig(fmt.Sprintf(loginRule, `,"scope":"global"`)), 1,
		toCluster(neverAnswers(t), clock), noCallTimeouts)
	req := get("app.example", "/login", "192.0.2.11")
	req.Headers[0][1] = "POST"
	s, act := send(t, p.VM(0), req)
	require.Equal(t, envoyhost.ActionPause, act, "the attempt is charged in its check")
	clock.Advance(225 * time.Millisecond)
	require.Equal(t, envoyhost.ActionContinue, wait(t, s), "the filter gives up on the check: failure_mode allow")
	act, err := s.SendResponseHeaders(answer(401).Headers, true)
	require.NoError(t, err)
	require.Equal(t, envoyhost.ActionPause, act, "the check charged nothing: the counted response waits for its charge")
	clock.Advance(200 * time.Millisecond)
	assert.Equal(t, envoyhost.ActionPause, state(t, s), "the host's timeout never fires")
	clock.Advance(25 * time.Millisecond)
	assert.Equal(t, envoyhost.ActionContinue, wait(t, s), "the filter gives up and the response goes on")
	assert.Equal(t, int64(2), counter(p, "meshlimit.global.deadline_expired"), "the check's and the charge's")
	assert.NoError(t, p.VM(0).Failed())
}

// TestConcurrentFailedAttemptsAreBoundedByTheQuotaAndAllCharged: attempts in flight hold the quota
// (a count_on rule charges each when it arrives, tentatively), so of 8 attempts sent before any is
// answered only the quota (5) reaches the upstream; each counted answer keeps its charge, and the
// penalty starts with them.
func TestConcurrentFailedAttemptsAreBoundedByTheQuotaAndAllCharged(t *testing.T) {
	p := load(t, module(t, "meshlimit"), loginConfig(""), 2)
	req := get("app.example", "/login", "203.0.113.60")
	req.Headers[0][1] = "POST"
	var streams []*envoyhost.Stream
	for i := range 8 {
		s, act := send(t, p.VM(i%2), req)
		if act != envoyhost.ActionContinue {
			require.NoError(t, s.Close())
			continue
		}
		streams = append(streams, s)
	}
	require.Len(t, streams, 5, "the attempts in flight hold the quota of 5")
	for _, s := range streams {
		_, err := s.SendResponseHeaders(answer(401).Headers, true)
		require.NoError(t, err)
	}
	assert.Equal(t, int64(5), counter(p, "meshlimit.rule.login.counted"))
	assert.Equal(t, 429, status(login(t, p.VM(0), "203.0.113.60", answer(200))))
}
