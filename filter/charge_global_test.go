package filter

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

// A global counted rule's charge is carried only by the check that sends its item: a second check
// of the stream (the body call of a rule that reads its cost from the body) does not carry it.

// When the headers' check failed (no charge made), the body call, which does not carry the counted
// rule, leaves its charge unmade: the counted response charges it, as after any failed check.
func TestACountedChargeThatTheBodyCallDoesNotCarryIsChargedOnItsCountedResponse(t *testing.T) {
	f := newFakeHost(t)
	p := f.start(globalWith(``, loginRule("global", `{"status":["401"]}`)+
		`,{"name":"tokens","scope":"global","key":[{"header":"x-user"}],"limits":[{"rate":"1000/d"}],"cost":`+fromBody+`}`))
	h, act := f.open(p, user("eve"), false)
	require.Equal(t, types.ActionPause, act, "the headers' check carries the counted rule")
	f.answerCall(f.callOf(h), "503", `{"error":"x"}`) // failed: failure_mode allows, nothing charged
	f.requestBody(h, `{"max_tokens": 40}`, true)
	body := f.callOf(h)
	require.NotContains(t, body.body, `/login/`, "the body call carries the body's rule alone")
	f.answerCall(body, "200", checkAnswer(true, 900, 0))
	assert.Equal(t, types.ActionPause, f.respond(h, [][2]string{{":status", "401"}}, true),
		"the counted response waits for its charge")
	charge := f.callOf(h)
	assert.Contains(t, charge.body, `/login/`)
	f.answerCall(charge, "200", checkAnswer(true, 2, 0))
	f.end(h)
	assert.Equal(t, int64(1), f.counter("meshlimit.rule.login.counted"))
}

// A response that comes while the request body is still awaited (the upstream answered early), or
// the end of such a stream, gives back the counted rule's charge when its answer does not count, and
// nothing of the other global rules the service admitted: the request reached the upstream, only its
// own denial gives them back.
func TestAnEarlyResponseGivesBackTheCountedChargeAloneAndNotTheOtherAdmissions(t *testing.T) {
	for _, tc := range []struct {
		name, status string
		undo         bool
	}{
		{"a counted response gives nothing back", "401", false},
		{"a response that does not count gives back the counted charge alone", "200", true},
		{"a stream that ends unanswered (counted) gives nothing back", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeHost(t)
			p := f.start(globalWith(``, `{"name":"per-user","scope":"global","key":[{"header":"x-user"}],"limits":[{"rate":"10/m"}]},`+
				loginRule("global", `{"status":["401"]}`)+
				`,{"name":"tokens","scope":"global","key":[{"header":"x-user"}],"limits":[{"rate":"1000/d"}],"cost":`+fromBody+`}`))
			h, act := f.open(p, user("eve"), false)
			require.Equal(t, types.ActionPause, act, "the headers' check")
			f.answerCall(f.callOf(h), "200", checkAnswers(dec(true, 9, 0), dec(true, 2, 0)))
			require.Nil(t, f.of(h).reply, "admitted with its headers; the body is still to come")
			if tc.status != "" {
				f.respond(h, [][2]string{{":status", tc.status}}, true)
			} else {
				f.end(h)
			}
			var undos []*fakeCall
			for _, c := range f.pending() { // at the end, the body's rule settles its default too
				if strings.Contains(c.body, `"undo":true`) {
					undos = append(undos, c)
				}
			}
			if tc.undo {
				require.Len(t, undos, 1, "one give-back call")
				assert.Contains(t, undos[0].body, `/login/`)
				assert.NotContains(t, undos[0].body, `/per-user/`, "per-user's admission is the request's")
			} else {
				assert.Empty(t, undos, "nothing to give back")
			}
			if tc.status != "" {
				f.end(h)
			}
			assert.Zero(t, f.counter("meshlimit.rule.per-user.given_back"))
		})
	}
}
