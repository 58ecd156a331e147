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

	"github.com/meshlimit/meshlimit/sharedstate"
	"github.com/meshlimit/meshlimit/wire"
)

// The reset poller (resets.go) on the fake host: a local rule and a counted one whose keys an admin
// reset at the service must free in this proxy's shared data.

const resetRules = `{"name":"local","key":[{"header":"x-user"}],"limits":[{"rate":"1/h"}]},` +
	`{"name":"login","key":[{"header":"x-login"}],"limits":[{"rate":"5/m"}],"count_on":{"status":["401"],"penalty":"15m"}}`

func resetConfig(poll string) string {
	return `{"global":{"cluster":"` + svc + `","timeout":"200ms","reset_poll":"` + poll + `"},"rules":[` + resetRules + `]}`
}

// resetKey is the descriptor key of rule's first limit for value, as the service logs it.
func resetKey(p *pluginContext, rule, value string) string {
	rs := ruleNamed(p.rules, rule)
	fp := rs.rule.LimitSets()[0].Limits[0].Fingerprint
	return p.name + "/" + rule + "/" + strconv.FormatUint(fp, 36) + "/" + value
}

func resetsAnswer(seq uint64, more, truncated bool, keys ...string) string {
	a := wire.ResetsAnswer{Seq: seq, More: more, Truncated: truncated}
	for i, k := range keys {
		a.Resets = append(a.Resets, wire.Reset{Seq: seq - uint64(len(keys)-1-i), Key: k})
	}
	return string(wire.AppendResetsAnswer(nil, &a))
}

// position reads the proxy's position in the reset log.
func position(t *testing.T, f *fakeHost) sharedstate.ResetPosition {
	t.Helper()
	v, _, err := f.Get("meshlimit/test.meshlimit/resets")
	require.NoError(t, err)
	pos, ok := sharedstate.ParseResetPosition(v)
	require.True(t, ok)
	return pos
}

func TestAResetInTheLogFreesTheKeyInEveryRecordOfThisProxy(t *testing.T) {
	f := newFakeHost(t)
	p := f.start(resetConfig("1s"))
	f.tickNow(p)
	f.answerCall(f.callTo(wire.ResetsPath), "200", resetsAnswer(7, false, false))
	assert.Equal(t, uint64(7), position(t, f).Seq, "a proxy without a position takes the log's")

	a, _ := f.open(p, user("ann"), true) // spends local's 1/h
	f.respond(a, [][2]string{{":status", "401"}}, true)
	f.end(a)
	bob := fakeReq("/", [2]string{"x-login", "bob"})
	for range 5 {
		h, _ := f.open(p, bob, true)
		f.respond(h, [][2]string{{":status", "401"}}, true) // login's fifth puts bob in the box
		f.end(h)
	}
	h, act := f.open(p, user("ann"), true)
	require.Equal(t, types.ActionPause, act)
	f.end(h)

	f.advance(time.Second)
	f.tickNow(p)
	call := f.callTo(wire.ResetsPath)
	assert.Contains(t, call.body, `"since":7`)
	h, act = f.open(p, bob, true)
	require.Equal(t, types.ActionPause, act, "bob is in the penalty box")
	f.end(h)
	f.answerCall(call, "200", resetsAnswer(11, false, false,
		resetKey(p, "local", "ann"), resetKey(p, "login", "bob"), "another.plugin/local/1/ann", p.name+"/nosuchrule/1/ann"))
	assert.Equal(t, int64(2), f.counter("meshlimit.global.resets_applied"), "only this plugin's rules' keys apply")
	assert.Equal(t, uint64(11), position(t, f).Seq)
	for _, r := range [][][2]string{user("ann"), bob} {
		h, act := f.open(p, r, true)
		assert.Equal(t, types.ActionContinue, act, "%v is free again", r)
		f.end(h)
	}
}

func TestOnlyOneWorkerOfAProxyPollsInAPeriod(t *testing.T) {
	f := newFakeHost(t)
	one := f.start(resetConfig("1s"))
	other := f.start(resetConfig("1s")) // another worker's plugin, on the same shared data
	f.tickNow(one)
	f.tickNow(other)
	assert.Len(t, f.pending(), 1, "the first claimed the period's poll")
	f.answerCall(f.pending()[0], "200", resetsAnswer(3, false, false))
	f.advance(500 * time.Millisecond)
	f.tickNow(other)
	assert.Empty(t, f.pending(), "not due yet")
	f.advance(500 * time.Millisecond)
	f.tickNow(other)
	assert.Len(t, f.pending(), 1, "the next period's poll")
}

func TestAnAnswerWithMoreEntriesMakesThePollDueAtTheNextTick(t *testing.T) {
	f := newFakeHost(t)
	p := f.start(resetConfig("1m"))
	f.tickNow(p)
	f.answerCall(f.callTo(wire.ResetsPath), "200", resetsAnswer(1, false, false))
	f.advance(time.Minute)
	f.tickNow(p)
	f.answerCall(f.callTo(wire.ResetsPath), "200", resetsAnswer(2, true, false, resetKey(p, "local", "ann")))
	f.advance(time.Millisecond)
	f.tickNow(p)
	call := f.callTo(wire.ResetsPath)
	assert.Contains(t, call.body, `"since":2`)
}

func TestATruncatedLogIsAdoptedAndWarnedAbout(t *testing.T) {
	f := newFakeHost(t)
	p := f.start(resetConfig("1s"))
	f.tickNow(p)
	f.answerCall(f.callTo(wire.ResetsPath), "200", resetsAnswer(50, false, false))
	f.advance(time.Second)
	f.tickNow(p)
	f.answerCall(f.callTo(wire.ResetsPath), "200", resetsAnswer(4, false, true))
	assert.Equal(t, uint64(4), position(t, f).Seq, "the service lost its log: its position is adopted")
	assert.Equal(t, int64(1), f.counter("meshlimit.global.resets_truncated"))
	assert.Len(t, f.logged(logWarn, "no longer holds position 50"), 1)
}

func TestALateAnswerNeverAppliesEntriesAnotherWorkerApplied(t *testing.T) {
	f := newFakeHost(t)
	slow := f.start(resetConfig("1s"))
	fast := f.start(resetConfig("1s"))
	f.tickNow(slow)
	f.answerCall(f.callTo(wire.ResetsPath), "200", resetsAnswer(1, false, false))
	f.advance(time.Second)
	f.tickNow(slow)
	late := f.callTo(wire.ResetsPath)
	f.advance(time.Second)
	f.tickNow(fast)
	pending := f.pending()
	require.Len(t, pending, 2, "the slow worker's call, and the fast one's of the next period")
	f.answerCall(pending[1], "200", resetsAnswer(2, false, false, resetKey(fast, "local", "ann")))
	assert.Equal(t, int64(1), f.counter("meshlimit.global.resets_applied"))
	f.answerCall(late, "200", resetsAnswer(2, false, false, resetKey(slow, "local", "ann")))
	assert.Equal(t, int64(1), f.counter("meshlimit.global.resets_applied"), "the late answer's entry was applied already")
}

func TestAFailedPollIsCountedWarnedOnceAndAskedAgainNextPeriod(t *testing.T) {
	for _, tc := range []struct {
		name, status, body, warn string
		wait                     time.Duration
	}{
		{"a 503", "503", `{"error":"store"}`, "status 503", time.Second},
		{"an unreadable answer", "200", `{"seq":`, "decoding the body", time.Second},
		{"a service that does not serve the log waits a minute", "404", ``, "does not serve the reset log", time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeHost(t)
			p := f.start(resetConfig("1s"))
			f.tickNow(p)
			f.answerCall(f.callTo(wire.ResetsPath), tc.status, tc.body)
			assert.Equal(t, int64(1), f.counter("meshlimit.global.resets_poll_failed"))
			assert.Len(t, f.logged(logWarn, tc.warn), 1, "%v", f.logs)
			f.advance(tc.wait - time.Millisecond)
			f.tickNow(p)
			assert.Empty(t, f.pending(), "not before %v", tc.wait)
			f.advance(time.Millisecond)
			f.tickNow(p)
			assert.Contains(t, f.callTo(wire.ResetsPath).body, `"since":0`, "from the same position")
		})
	}
}

func TestAPollTheClusterRefusesIsCountedAndTheNextPeriodAsksAgain(t *testing.T) {
	f := newFakeHost(t)
	p := f.start(resetConfig("1s"))
	f.refuse.dispatch = errors.New("BadArgument")
	f.tickNow(p)
	assert.Equal(t, int64(1), f.counter("meshlimit.global.resets_poll_failed"))
	f.refuse.dispatch = nil
	f.advance(time.Second)
	f.tickNow(p)
	f.callTo(wire.ResetsPath)
}

func TestAPollUnansweredPastItsDeadlineIsClaimedAgain(t *testing.T) {
	f := newFakeHost(t)
	p := f.start(resetConfig("100ms"))
	f.tickNow(p)
	f.callTo(wire.ResetsPath)
	f.advance(100 * time.Millisecond)
	f.tickNow(p)
	assert.Len(t, f.pending(), 1, "the call in flight is not doubled before its deadline")
	f.advance(200 * time.Millisecond)
	f.tickNow(p)
	assert.Len(t, f.pending(), 2, "after its deadline the poll is made again")
}

func TestAResetOfAHashedValueOrOfSomethingNotAKeyFreesNothing(t *testing.T) {
	f := newFakeHost(t)
	p := f.start(resetConfig("1s"))
	long := strings.Repeat("x", wire.MaxValueBytes+1)
	body := wire.AppendRequestEnd(wire.AppendDescriptor(wire.AppendRequestStart(nil), 0,
		wire.Key{Plugin: p.name, Rule: "local", Fingerprint: 1, Value: long}, p.rules[0].rule.LimitSets()[0].Limits[0].Limit, 1))
	_, _, hashed, ok := wire.ParseKey(descriptorKey(t, body), p.name)
	require.True(t, ok)
	assert.False(t, p.resets.apply(p.name+"/local/1/"+hashed), "a hashed value's original is not known")
	assert.False(t, p.resets.apply("not a key"))
}

func descriptorKey(t *testing.T, body []byte) string {
	t.Helper()
	var req wire.Request
	require.NoError(t, wire.DecodeRequest(body, wire.DecodeOptions{}, &req))
	return req.Descriptors[0].Key
}
