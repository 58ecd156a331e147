package filter

import (
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
