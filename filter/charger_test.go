package filter

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

// The charger (charge.go) on the fake host: a counted rule charges the responses its count_on
// matches, and a key it exhausts goes into the penalty box.

func loginRule(scope, countOn string) string {
	return `{"name":"login","scope":"` + scope + `","key":[{"header":"x-user"}],"limits":[{"rate":"3/m"}],"count_on":` + countOn + `}`
}

// attempt runs one request of u that the upstream answers with status, and returns the request's
// action.
func attempt(f *fakeHost, p *pluginContext, u, status string) types.Action {
	h, act := f.open(p, user(u), true)
	if act == types.ActionContinue {
		f.respond(h, [][2]string{{":status", status}}, true)
	}
	f.end(h)
	return act
}

func TestACountedRuleChargesOnlyTheResponsesItCounts(t *testing.T) {
	for _, tc := range []struct {
		name     string
		statuses []string
		want     []types.Action
	}{
		{"three 401s put the key in the penalty box", []string{"401", "401", "401", "200"},
			[]types.Action{types.ActionContinue, types.ActionContinue, types.ActionContinue, types.ActionPause}},
		{"200s are never charged", []string{"200", "200", "200", "200", "401"},
			[]types.Action{types.ActionContinue, types.ActionContinue, types.ActionContinue, types.ActionContinue, types.ActionContinue}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeHost(t)
			p := f.start(`{"rules":[` + loginRule("local", `{"status":["401"],"penalty":"15m"}`) + `]}`)
			for i, s := range tc.statuses {
				assert.Equal(t, tc.want[i], attempt(f, p, "eve", s), "request %d", i)
			}
		})
	}
}

func TestAKeyInThePenaltyBoxIsDeniedUntilThePenaltyEnds(t *testing.T) {
	f := newFakeHost(t)
	p := f.start(`{"rules":[` + loginRule("local", `{"status":["401"],"penalty":"15m"}`) + `]}`)
	for range 3 {
		attempt(f, p, "eve", "401")
	}
	h, act := f.open(p, user("eve"), true)
	require.Equal(t, types.ActionPause, act)
	retry, _ := pairValue(f.of(h).reply.headers, "retry-after")
	assert.Equal(t, "900", retry, "the penalty's 15 minutes")
	f.end(h)
	assert.Equal(t, int64(1), f.counter("meshlimit.rule.login.penalties"))
	assert.Equal(t, int64(1), f.counter("meshlimit.rule.login.penalty_denied"))
	assert.Equal(t, types.ActionContinue, attempt(f, p, "mallory", "200"), "another key is not boxed")
	f.advance(15 * time.Minute)
	assert.Equal(t, types.ActionContinue, attempt(f, p, "eve", "200"), "the penalty is over")
}

func TestAStreamThatEndsWithoutAResponseIsChargedUnlessTheRuleSaysOtherwise(t *testing.T) {
	for _, tc := range []struct {
		name, countOn string
		charged       int64
	}{
		{"by default leaving early is charged", `{"status":["401"]}`, 1},
		{"count_unanswered false charges nothing", `{"status":["401"],"count_unanswered":false}`, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeHost(t)
			p := f.start(`{"rules":[` + loginRule("local", tc.countOn) + `]}`)
			h, _ := f.open(p, user("eve"), true)
			f.end(h)
			assert.Equal(t, tc.charged, f.counter("meshlimit.rule.login.counted"))
			assert.Equal(t, tc.charged, f.counter("meshlimit.rule.login.unanswered"))
		})
	}
}

func TestTheFiltersOwnLocalReplyIsNeverCharged(t *testing.T) {
	f := newFakeHost(t)
	p := f.start(`{"rules":[` + loginRule("local", `{"status":["429"]}`) + `,{"name":"gate","limits":[{"rate":"1/h"}]}]}`)
	attempt(f, p, "eve", "200")
	h, act := f.open(p, user("eve"), true)
	require.Equal(t, types.ActionPause, act, "the gate denies")
	f.respond(h, [][2]string{{":status", "429"}}, true) // the local reply passes the response path
	f.end(h)
	assert.Zero(t, f.counter("meshlimit.rule.login.counted"))
}

// A global counted rule charges each attempt in its check, tentatively; the response decides it.
func TestAGlobalCountedRuleChargesEachAttemptInItsCheckAndTheResponseDecidesIt(t *testing.T) {
	for _, tc := range []struct {
		name, answer, status string
		boxed                bool
		givenBack            int64
	}{
		{"a counted response to an exhausting attempt boxes the key", checkAnswer(true, 0, 0), "401", true, 0},
		{"a counted response with room left keeps the charge", checkAnswer(true, 2, 0), "401", false, 0},
		{"a response that does not count gives the charge back", checkAnswer(true, 0, 0), "200", false, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeHost(t)
			p := f.start(globalWith(``, loginRule("global", `{"status":["401"],"penalty":"15m"}`)))
			h, act := f.open(p, user("eve"), true)
			require.Equal(t, types.ActionPause, act, "the attempt is charged in its check")
			check := f.callOf(h)
			assert.Contains(t, check.body, `"cost":1`)
			f.answerCall(check, "200", tc.answer)
			assert.Equal(t, types.ActionContinue, f.respond(h, [][2]string{{":status", tc.status}}, true), "the response waits for nothing")
			undo := f.pending()
			if tc.givenBack > 0 {
				require.Len(t, undo, 1, "one give-back call")
				assert.Contains(t, undo[0].body, `"undo":true,"delta":-1`)
				f.answerCall(undo[0], "200", `{"allowed":true,"settled":1}`)
			} else {
				assert.Empty(t, undo)
			}
			f.end(h)
			assert.Equal(t, tc.givenBack, f.counter("meshlimit.rule.login.given_back"))
			next, act := f.open(p, user("eve"), true)
			assert.Equal(t, tc.boxed, act == types.ActionPause && f.of(next).reply != nil, "boxed")
			f.end(next)
		})
	}
}

// A request denied after its counted rule's attempt was charged (another global rule of the same
// answer denies) gives the charge back.
func TestADeniedRequestGivesBackItsGlobalCountedAttempt(t *testing.T) {
	f := newFakeHost(t)
	p := f.start(globalWith(``, loginRule("global", `{"status":["401"]}`)+`,{"name":"gate","scope":"global","limits":[{"rate":"1/h"}]}`))
	h, act := f.open(p, user("eve"), true)
	require.Equal(t, types.ActionPause, act)
	f.answerCall(f.callOf(h), "200", checkAnswers(dec(true, 2, 0), dec(false, 0, 1000)))
	require.NotNil(t, f.of(h).reply, "the gate denies")
	undo := f.pending()
	require.Len(t, undo, 1)
	assert.Contains(t, undo[0].body, `/login/`)
	assert.Contains(t, undo[0].body, `"undo":true`)
	f.end(h)
	assert.Equal(t, int64(1), f.counter("meshlimit.rule.login.given_back"))
}

// A check that failed made no charge: the counted response is charged as before, the response
// waiting for the service's answer, at most until the call's deadline.
func TestAGlobalChargeAfterAFailedCheckWaitsForTheServiceUntilItsDeadline(t *testing.T) {
	f := newFakeHost(t)
	p := f.start(globalWith(``, loginRule("global", `{"status":["401"]}`)))
	h, _ := f.open(p, user("eve"), true)
	f.answerCall(f.callOf(h), "503", `{"error":"x"}`)
	require.Equal(t, types.ActionPause, f.respond(h, [][2]string{{":status", "401"}}, true))
	call := f.callOf(h)
	f.advance(205 * time.Millisecond)
	f.tickNow(p)
	assert.Equal(t, 1, f.of(h).resumed[responsePart])
	f.answerCall(call, "200", checkAnswer(false, 0, 60000))
	assert.Equal(t, int64(1), f.counter("meshlimit.global.late_answers"))
	f.end(h)
}

func TestAGlobalChargeWithoutTheServiceIsLostAndTheResponseGoesOn(t *testing.T) {
	f := newFakeHost(t)
	p := f.start(globalWith(``, loginRule("global", `{"status":["401"]}`)))
	f.refuse.dispatch = errors.New("BadArgument")
	h, act := f.open(p, user("eve"), true)
	require.Equal(t, types.ActionContinue, act, "failure_mode allow")
	assert.Equal(t, types.ActionContinue, f.respond(h, [][2]string{{":status", "401"}}, true))
	f.end(h)
	assert.Equal(t, int64(2), f.counter("meshlimit.global.failures"), "the check and the charge")
}

func TestAGlobalChargeOfAStreamThatEndedUnansweredIsKeptOrGivenBackAndNotAwaited(t *testing.T) {
	for _, tc := range []struct {
		countOn string
		calls   int
	}{{`{"status":["401"]}`, 0}, {`{"status":["401"],"count_unanswered":false}`, 1}} {
		f := newFakeHost(t)
		p := f.start(globalWith(``, loginRule("global", tc.countOn)))
		h, _ := f.open(p, user("eve"), true)
		f.answerCall(f.callOf(h), "200", checkAnswer(true, 2, 0))
		f.end(h)
		calls := f.pending()
		require.Len(t, calls, tc.calls, "%s: a give-back call only when unanswered is not counted", tc.countOn)
		assert.Empty(t, p.global.waiting, "nothing waits for an answer")
	}
}

func TestParallelGuessesOnACountedRuleReachTheUpstreamNoMoreThanSequentialOnes(t *testing.T) {
	f := newFakeHost(t)
	p := f.start(`{"rules":[` + loginRule("local", `{"status":["401"],"penalty":"15m"}`) + `]}`)
	var open []*httpContext
	for range 1000 { // all in flight at once (HTTP/2 multiplexing), none answered yet
		h, act := f.open(p, user("eve"), true)
		if act == types.ActionContinue {
			open = append(open, h)
		} else {
			f.end(h)
		}
	}
	assert.Len(t, open, 3, "the attempts in flight hold the 3/m quota")
	for _, h := range open {
		f.respond(h, [][2]string{{":status", "401"}}, true)
		f.end(h)
	}
	assert.Equal(t, types.ActionPause, attempt(f, p, "eve", "401"), "the penalty box holds the key")
}

func TestAnAttemptWhoseAnswerIsNotCountedGivesItsTentativeChargeBack(t *testing.T) {
	f := newFakeHost(t)
	p := f.start(`{"rules":[` + loginRule("local", `{"status":["401"],"count_unanswered":false}`) + `]}`)
	var open []*httpContext
	for range 3 {
		h, act := f.open(p, user("ann"), true)
		require.Equal(t, types.ActionContinue, act)
		open = append(open, h)
	}
	f.respond(open[0], [][2]string{{":status", "200"}}, true) // not counted: given back
	f.end(open[0])
	f.end(open[1]) // no answer, and unanswered requests are not counted: given back
	h, act := f.open(p, user("ann"), true)
	assert.Equal(t, types.ActionContinue, act, "two of the three units are back")
	f.end(h)
	f.respond(open[2], [][2]string{{":status", "401"}}, true) // counted: kept
	f.end(open[2])
	assert.Equal(t, int64(3), f.counter("meshlimit.rule.login.given_back"))
}
