package filter

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

// The global client on the fake host: the fake records each call and the test answers it as the
// decision service (or a failing cluster) would.

// globalRule is a configuration with a decision service (its reset log not read) and one rule,
// per-user, keyed by x-user with a limit of 10/m, and fields (its scope, at least).
func globalRule(fields string) string {
	return globalWith(``, `{"name":"per-user",`+fields+`,"key":[{"header":"x-user"}],"limits":[{"rate":"10/m"}]}`)
}

// globalWith is a configuration with a decision service (global: more of its fields) and rules.
func globalWith(global, rules string) string {
	return `{"global":{"cluster":"` + svc + `","timeout":"200ms","breaker":{"failures":2,"cooldown":"1h"},"reset_poll":"off"` + global + `},"rules":[` + rules + `]}`
}

// svc is the decision service's cluster.
const svc = "outbound|8081||meshlimit.svc"

// checkAnswer is a 200 answer of /v1/check with one decision of a limit of 10.
func checkAnswer(allowed bool, remaining, retryMs int) string {
	return checkAnswers(dec(allowed, remaining, retryMs))
}

func dec(allowed bool, remaining, retryMs int) string {
	return `{"allowed":` + strconv.FormatBool(allowed) + `,"limit":10,"remaining":` + strconv.Itoa(remaining) +
		`,"reset_ms":1000,"retry_after_ms":` + strconv.Itoa(retryMs) + `}`
}

func checkAnswers(decisions ...string) string {
	all := true
	for _, d := range decisions {
		all = all && strings.HasPrefix(d, `{"allowed":true`)
	}
	return `{"allowed":` + strconv.FormatBool(all) + `,"decisions":[` + strings.Join(decisions, ",") + `]}`
}

func user(u string) [][2]string { return fakeReq("/", [2]string{"x-user", u}) }

func TestAGlobalRuleIsDecidedByTheServicesAnswer(t *testing.T) {
	for _, tc := range []struct {
		name       string
		fields     string
		status     string // the answer's; "" for a reset
		body       string
		wantReply  uint32 // 0: resumed
		wantMetric string
	}{
		{"an admission resumes the request", `"scope":"global"`, "200", checkAnswer(true, 9, 0), 0, "meshlimit.rule.per-user.allowed"},
		{"a denial answers with a 429", `"scope":"global"`, "200", checkAnswer(false, 0, 60000), 429, "meshlimit.rule.per-user.limited"},
		{"a shadow rule's denial lets the request through", `"scope":"global","shadow":true`, "200", checkAnswer(false, 0, 60000), 0, "meshlimit.rule.per-user.shadow_limited"},
		{"a 503 applies the fallback, which admits", `"scope":"global","fallback":[{"rate":"1/h"}]`, "503", `{"error":"store unavailable"}`, 0, "meshlimit.rule.per-user.fallback"},
		{"a reset fails open by default", `"scope":"global"`, "", "", 0, "meshlimit.global.failures"},
		{"a reset fails closed with failure_mode deny", `"scope":"global","failure_mode":"deny"`, "", "", 429, "meshlimit.rule.per-user.failure_denied"},
		{"a 4xx is a refusal: failure_mode applies, not the fallback", `"scope":"global","failure_mode":"deny","fallback":[{"rate":"1/h"}]`, "400", `{"error":"too many descriptors"}`, 429, "meshlimit.global.rejected"},
		{"an unreadable body is a failure", `"scope":"global"`, "200", `{"allowed":`, 0, "meshlimit.global.failures"},
		{"an answer with the wrong number of decisions is a failure", `"scope":"global"`, "200", checkAnswers(dec(true, 1, 0), dec(true, 1, 0)), 0, "meshlimit.global.failures"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeHost(t)
			p := f.start(globalRule(tc.fields))
			h, act := f.open(p, user("alice"), true)
			require.Equal(t, types.ActionPause, act, "paused for the service")
			call := f.callTo("/v1/check")
			assert.Equal(t, svc, call.cluster)
			assert.Equal(t, uint32(200), call.timeout)
			assert.Contains(t, call.body, `/alice"`, "the key value ends the descriptor key")
			f.answerCall(call, tc.status, tc.body)
			s := f.of(h)
			if tc.wantReply == 0 {
				assert.Nil(t, s.reply)
				assert.Equal(t, 1, s.resumed[requestPart], "resumed")
			} else {
				require.NotNil(t, s.reply)
				assert.Equal(t, tc.wantReply, s.reply.status)
				assert.Zero(t, s.resumed[requestPart])
			}
			assert.Equal(t, int64(1), f.counter(tc.wantMetric))
			f.end(h)
			assert.Empty(t, p.global.waiting, "nothing waits once answered")
		})
	}
}

func TestADeniedKeyIsAnsweredFromTheOverLimitCacheUntilItsRetryAfter(t *testing.T) {
	f := newFakeHost(t)
	p := f.start(globalRule(`"scope":"global"`))
	h, _ := f.open(p, user("bob"), true)
	f.answerCall(f.callTo("/v1/check"), "200", checkAnswer(false, 0, 60000))
	f.end(h)

	again, act := f.open(p, user("bob"), true)
	assert.Equal(t, types.ActionPause, act)
	assert.Empty(t, f.pending(), "answered without a call")
	require.NotNil(t, f.of(again).reply)
	retry, _ := pairValue(f.of(again).reply.headers, "retry-after")
	assert.Equal(t, "60", retry)
	assert.Equal(t, int64(1), f.counter("meshlimit.rule.per-user.cached_denials"))

	f.open(p, user("carol"), true)
	assert.Len(t, f.pending(), 1, "another key is not blocked by bob's denial")

	f.advance(time.Minute)
	f.open(p, user("bob"), true)
	assert.Len(t, f.pending(), 2, "after its Retry-After the key asks the service again")
}

func TestARuleThatCachesNoDenialsAsksTheServiceEveryTime(t *testing.T) {
	f := newFakeHost(t)
	p := f.start(globalRule(`"scope":"global","cache_denials":false`))
	for range 2 {
		h, _ := f.open(p, user("bob"), true)
		f.answerCall(f.callTo("/v1/check"), "200", checkAnswer(false, 0, 60000))
		f.end(h)
	}
	assert.Zero(t, f.counter("meshlimit.rule.per-user.cached_denials"))
}

func TestTheBreakerOpensAfterTwoFailuresAndShortCircuitsToTheFallback(t *testing.T) {
	f := newFakeHost(t)
	p := f.start(globalRule(`"scope":"global","fallback":[{"rate":"1/h"}]`))
	for range 2 {
		h, _ := f.open(p, user("erin"), true)
		f.answerCall(f.callTo("/v1/check"), "", "")
		f.end(h)
	}
	assert.Equal(t, int64(1), f.counter("meshlimit.global.breaker_opened"))
	h, act := f.open(p, user("erin"), true)
	assert.Empty(t, f.pending(), "the open breaker makes no call")
	assert.Equal(t, types.ActionPause, act, "the fallback's 1/h was spent by the first failure")
	assert.Equal(t, uint32(429), f.of(h).reply.status)
	assert.Equal(t, int64(1), f.counter("meshlimit.global.short_circuited"))

	f.advance(time.Hour)
	f.open(p, user("frank"), true)
	require.Len(t, f.pending(), 1, "after the cooldown one probe goes out")
	f.open(p, user("gina"), true)
	assert.Len(t, f.pending(), 1, "one probe at a time")
	f.answerCall(f.pending()[0], "200", checkAnswer(true, 9, 0))
	f.open(p, user("gina"), true)
	assert.Len(t, f.pending(), 1, "a successful probe closes the breaker")
}

func TestACallTheClusterRefusesIsDecidedAtOnceByTheFallback(t *testing.T) {
	f := newFakeHost(t)
	p := f.start(globalRule(`"scope":"global","failure_mode":"deny"`))
	f.refuse.dispatch = errors.New("BadArgument")
	h, act := f.open(p, user("hal"), true)
	assert.Equal(t, types.ActionPause, act)
	assert.Equal(t, uint32(429), f.of(h).reply.status, "no fallback: failure_mode deny")
	assert.Len(t, f.logged(logWarn, `calling cluster "`+svc+`"`), 1)
	assert.Equal(t, int64(1), f.counter("meshlimit.global.failures"))
	f.end(h)
	assert.Zero(t, h.calls)
}

func TestACallUnansweredByItsDeadlineIsGivenUpOnTheTick(t *testing.T) {
	f := newFakeHost(t)
	p := f.start(globalRule(`"scope":"global","failure_mode":"deny"`))
	h, _ := f.open(p, user("ivan"), true)
	call := f.callTo("/v1/check")
	f.advance(200 * time.Millisecond)
	f.tickNow(p)
	assert.Nil(t, f.of(h).reply, "within timeout + slack it still waits")
	f.advance(deadlineSlack)
	f.tickNow(p)
	require.NotNil(t, f.of(h).reply, "decided by failure_mode deny")
	assert.Equal(t, int64(1), f.counter("meshlimit.global.deadline_expired"))
	f.answerCall(call, "200", checkAnswer(true, 9, 0))
	assert.Equal(t, int64(1), f.counter("meshlimit.global.late_answers"), "a late answer is ignored")
	f.end(h)
	assert.Contains(t, p.free, h, "its call answered, the context is recycled")
}

func TestAStreamThatEndsBeforeItsAnswerIsForgottenAndNotRecycled(t *testing.T) {
	f := newFakeHost(t)
	p := f.start(globalRule(`"scope":"global"`))
	h, _ := f.open(p, user("jo"), true)
	call := f.callTo("/v1/check")
	f.end(h)
	assert.Empty(t, p.global.waiting)
	assert.NotContains(t, p.free, h, "a context whose call is out is never reused")
	f.answerCall(call, "200", checkAnswer(true, 9, 0)) // dropped: the stream is gone
	f.advance(time.Second)
	f.tickNow(p)
	assert.Zero(t, f.counter("meshlimit.global.deadline_expired"))
}

func TestABothScopedRuleIsDecidedLocallyAndByTheService(t *testing.T) {
	f := newFakeHost(t)
	p := f.start(globalWith(``, `{"name":"both","scope":"both","key":[{"header":"x-user"}],"limits":[{"rate":"1/h"}]}`))
	h, act := f.open(p, user("kim"), true)
	require.Equal(t, types.ActionPause, act)
	f.answerCall(f.callTo("/v1/check"), "200", checkAnswer(true, 0, 0))
	assert.Equal(t, 1, f.of(h).resumed[requestPart])
	h, act = f.open(p, user("kim"), true)
	assert.Equal(t, types.ActionPause, act)
	assert.Empty(t, f.pending(), "the local part denies before any call")
	assert.Equal(t, uint32(429), f.of(h).reply.status)
}

func TestAGlobalLeakyBucketShapesTheRequestItAdmits(t *testing.T) {
	f := newFakeHost(t)
	p := f.start(globalRule(`"scope":"global"`))
	h, _ := f.open(p, user("lee"), true)
	f.answerCall(f.callTo("/v1/check"), "200", `{"allowed":true,"decisions":[{"allowed":true,"limit":10,"remaining":9,"reset_ms":1000,"retry_after_ms":0,"delay_ms":30}]}`)
	assert.Zero(t, f.of(h).resumed[requestPart], "held for its delay")
	f.advance(30 * time.Millisecond)
	f.tickNow(p)
	assert.Equal(t, 1, f.of(h).resumed[requestPart], "released by the tick")
}

func TestTheBreakerLetsOneProbeThroughAfterItsCooldown(t *testing.T) {
	b := breaker{threshold: 2, cooldown: 100}
	steps := []struct {
		name   string
		now    int64
		fail   bool // else a success, when allowed
		allow  bool
		opened bool
	}{
		{"closed: a call", 0, true, true, false},
		{"one failure: still closed", 1, true, true, true},
		{"open: no call", 50, false, false, false},
		{"after the cooldown: a probe", 101, true, true, true},
		{"a failed probe reopens it", 150, false, false, false},
		{"the next probe", 201, false, true, false},
		{"a successful probe closed it", 202, false, true, false},
	}
	for _, s := range steps {
		allowed := b.allow(s.now)
		assert.Equal(t, s.allow, allowed, s.name)
		if !allowed {
			continue
		}
		if s.fail {
			assert.Equal(t, s.opened, b.failure(s.now), s.name)
		} else {
			b.success()
		}
	}
	assert.False(t, b.open())
}
