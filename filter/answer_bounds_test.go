package filter

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

// seenAnswer is what a client saw of a request decided by one answer of the service.
type seenAnswer struct {
	denied bool
	t      int64  // the RateLimit t of the first member
	retry  string // Retry-After, "" when absent
}

// globalAnswered sends one request of user alice through p, answers its check with decision and
// returns what the client saw.
func globalAnswered(t *testing.T, f *fakeHost, p *pluginContext, decision string) seenAnswer {
	t.Helper()
	h, act := f.open(p, user("alice"), true)
	require.Equal(t, types.ActionPause, act, "paused for the service")
	f.answerCall(f.callTo("/v1/check"), "200", checkAnswers(decision))
	var s seenAnswer
	var headers [][2]string
	if reply := f.of(h).reply; reply != nil {
		s.denied, headers = true, reply.headers
	} else {
		f.respond(h, [][2]string{{":status", "200"}}, true)
		headers = f.of(h).resp
	}
	rl, ok := pairValue(headers, "ratelimit")
	require.True(t, ok, "a RateLimit field")
	s.t = policyParam(t, rl, "t")
	s.retry, _ = pairValue(headers, "retry-after")
	f.end(h)
	return s
}

// monthEnd is a minute before February 2026 (UTC): a monthly quota's period ends in 60 s.
var monthEnd = time.Date(2026, 1, 31, 23, 59, 0, 0, time.UTC).UnixNano()

func globalPlan(rate string) string {
	return globalWith(``, `{"name":"plan","scope":"global","cache_denials":false,"key":[{"header":"x-user"}],"limits":[{"rate":"`+rate+`"}]}`)
}

// TestAGlobalCalendarQuotaWhoseAnswerLacksAnEffectiveWindowSendsTheTimeLeftInItsPeriod: review 23
// found t=0 when the answer had no effective_ms and reset_ms 0 (the derivation used the window, 0 for a
// calendar rate) or only values too large to convert. The filter knows the period: t is its end.
func TestAGlobalCalendarQuotaWhoseAnswerLacksAnEffectiveWindowSendsTheTimeLeftInItsPeriod(t *testing.T) {
	const huge = "10000000000000" // 1e13 ms: overflows a time.Duration
	for _, tc := range []struct {
		name, decision string
		denied         bool
		retry          string
	}{
		{"an unused quota without reset", `{"allowed":true,"limit":10,"remaining":10,"reset_ms":0,"retry_after_ms":0}`, false, ""},
		{"a used quota without reset", `{"allowed":true,"limit":10,"remaining":9,"reset_ms":0,"retry_after_ms":0}`, false, ""},
		{"a denial without reset nor retry", `{"allowed":false,"limit":10,"remaining":0,"reset_ms":0,"retry_after_ms":0}`, true, "60"},
		{"every figure past what a duration holds", `{"allowed":true,"limit":10,"remaining":3,"reset_ms":` + huge + `,"retry_after_ms":0,"effective_ms":` + huge + `}`, false, ""},
		{"a negative effective window", `{"allowed":true,"limit":10,"remaining":3,"reset_ms":0,"retry_after_ms":0,"effective_ms":-5}`, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeHost(t)
			f.clock = monthEnd
			p := f.start(globalPlan("10/month"))
			s := globalAnswered(t, f, p, tc.decision)
			assert.Equal(t, seenAnswer{denied: tc.denied, t: 60, retry: tc.retry}, s)
		})
	}
}

// TestAServiceAnswerClaimingAWaitPastWhatTheLimitCanNeedIsCappedAtIt: review 23 found t and
// Retry-After of up to 400 days rendered for a period that ends in 60 s. They are capped at the
// calendar period's end, and for a rolling rate at its longest wait (a 10/m bucket's full refill).
func TestAServiceAnswerClaimingAWaitPastWhatTheLimitCanNeedIsCappedAtIt(t *testing.T) {
	const days400, max = "34560000000", "9223372036854775807"
	for _, tc := range []struct {
		name, rate, decision string
		want                 seenAnswer
	}{
		{"an admission with a 400-day effective window, a month ending in a minute", "10/month",
			`{"allowed":true,"limit":10,"remaining":3,"reset_ms":1000,"retry_after_ms":0,"effective_ms":` + days400 + `}`, seenAnswer{t: 60}},
		{"a denial of 400 days, a month ending in a minute", "10/month",
			`{"allowed":false,"limit":10,"remaining":0,"reset_ms":` + days400 + `,"retry_after_ms":` + days400 + `,"effective_ms":` + days400 + `}`, seenAnswer{true, 60, "60"}},
		{"a denial of 2^63 ms, a month ending in a minute", "10/month",
			`{"allowed":false,"limit":10,"remaining":0,"reset_ms":` + max + `,"retry_after_ms":` + max + `,"effective_ms":` + max + `}`, seenAnswer{true, 60, "60"}},
		{"a denial of 400 days for 10/m", "10/m",
			`{"allowed":false,"limit":10,"remaining":0,"reset_ms":` + days400 + `,"retry_after_ms":` + days400 + `,"effective_ms":` + days400 + `}`, seenAnswer{true, 60, "60"}},
		{"an admission of 2^63 ms for 10/h", "10/h",
			`{"allowed":true,"limit":10,"remaining":5,"reset_ms":` + max + `,"retry_after_ms":0,"effective_ms":` + max + `}`, seenAnswer{t: 3600}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeHost(t)
			f.clock = monthEnd
			p := f.start(globalPlan(tc.rate))
			assert.Equal(t, tc.want, globalAnswered(t, f, p, tc.decision))
		})
	}
}

// TestADenialWithAHugeRetryAfterIsCachedNoLongerThanTheRuleCanNeed: review 23 found a 366-day denial
// of a 10/m rule held in the over-limit cache (cache_denials) long after the service recovered. The
// cache holds it at most the rule's longest wait, 60 s: then the service is asked again.
func TestADenialWithAHugeRetryAfterIsCachedNoLongerThanTheRuleCanNeed(t *testing.T) {
	const days366 = "31622400000"
	f := newFakeHost(t)
	p := f.start(globalWith(``, `{"name":"plan","scope":"global","key":[{"header":"x-user"}],"limits":[{"rate":"10/m"}]}`))
	s := globalAnswered(t, f, p, `{"allowed":false,"limit":10,"remaining":0,"reset_ms":`+days366+`,"retry_after_ms":`+days366+`}`)
	require.Equal(t, seenAnswer{true, 60, "60"}, s)

	f.advance(59 * time.Second)
	h, act := f.open(p, user("alice"), true)
	require.Equal(t, types.ActionPause, act)
	require.NotNil(t, f.of(h).reply, "still denied from the cache")
	assert.Empty(t, f.pending(), "no call while cached")
	f.end(h)

	f.advance(time.Second)
	s = globalAnswered(t, f, p, `{"allowed":true,"limit":10,"remaining":9,"reset_ms":6000,"retry_after_ms":0,"effective_ms":6000}`)
	assert.Equal(t, seenAnswer{t: 6}, s, "the service is asked again after the 60 s the rule can need")
}

// TestAGlobalChargesPenaltyBoxHoldsAHugeRetryAfterNoLongerThanTheRuleCanNeed: a counted rule
// whose attempt the service denies boxes the key for the service's Retry-After; a 366-day one holds
// it at most the rule's longest wait (3/m: 60 s).
func TestAGlobalChargesPenaltyBoxHoldsAHugeRetryAfterNoLongerThanTheRuleCanNeed(t *testing.T) {
	f := newFakeHost(t)
	p := f.start(globalWith(``, loginRule("global", `{"status":["401"]}`)))
	h, act := f.open(p, user("eve"), true)
	require.Equal(t, types.ActionPause, act)
	f.answerCall(f.callOf(h), "200", checkAnswers(`{"allowed":false,"limit":3,"remaining":0,"reset_ms":31622400000,"retry_after_ms":31622400000}`))
	require.NotNil(t, f.of(h).reply, "the attempt is denied")
	f.end(h)

	f.advance(59 * time.Second)
	boxed, act := f.open(p, user("eve"), true)
	assert.Equal(t, types.ActionPause, act)
	assert.NotNil(t, f.of(boxed).reply, "boxed 59 s later")
	f.end(boxed)
	f.advance(time.Second)
	next, act := f.open(p, user("eve"), true)
	assert.Equal(t, types.ActionPause, act)
	assert.Nil(t, f.of(next).reply, "out of the box after the 60 s the rule can need: the service is asked")
	assert.Len(t, f.pending(), 1)
	f.end(next)
}

// TestAGlobalConcurrencyDenialWithARetryAfterIsNeitherCachedNorRendered: the service denies a
// concurrency limit with retry_after_ms -1 (a permit comes back when a request ends, not at a
// time); one that claims 366 days must not make every proxy refuse the key from its cache for that
// long, nor send the client a Retry-After.
func TestAGlobalConcurrencyDenialWithARetryAfterIsNeitherCachedNorRendered(t *testing.T) {
	f := newFakeHost(t)
	p := f.start(globalWith(``, globalSlots))
	h, act := f.open(p, user("u"), true)
	require.Equal(t, types.ActionPause, act)
	f.answerCall(f.callOf(h), "200", checkAnswers(`{"allowed":false,"limit":50,"remaining":0,"reset_ms":0,"retry_after_ms":31622400000}`))
	reply := f.of(h).reply
	require.NotNil(t, reply, "denied")
	_, retry := pairValue(reply.headers, "retry-after")
	assert.False(t, retry, "no Retry-After for a concurrency limit")
	f.end(h)
	for _, c := range f.pending() { // the denied permit's release, if any
		f.answerCall(c, "200", permitAnswer(0))
	}

	f.advance(time.Second)
	next, act := f.open(p, user("u"), true)
	require.Equal(t, types.ActionPause, act)
	assert.Nil(t, f.of(next).reply, "not denied from the cache")
	assert.Len(t, f.pending(), 1, "the service is asked again")
}

// TestACachedCalendarDenialEndsExactlyWithItsPeriod: the service's Retry-After is whole milliseconds
// rounded up; a calendar denial cached from it must not outlive the period by that rounding: at the
// first instant of March the key is asked about again.
func TestACachedCalendarDenialEndsExactlyWithItsPeriod(t *testing.T) {
	march := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	f := newFakeHost(t)
	f.clock = march - int64(59*time.Second+300*time.Millisecond+300*time.Microsecond)
	p := f.start(globalWith(``, `{"name":"plan","scope":"global","key":[{"header":"x-user"}],"limits":[{"rate":"1/month"}]}`))
	s := globalAnswered(t, f, p, `{"allowed":false,"limit":1,"remaining":0,"reset_ms":59301,"retry_after_ms":59301,"effective_ms":59301}`)
	require.Equal(t, seenAnswer{true, 60, "60"}, s)

	f.clock = march - 1
	h, _ := f.open(p, user("alice"), true)
	require.NotNil(t, f.of(h).reply, "denied from the cache to the period's last nanosecond")
	f.end(h)
	f.clock = march
	s = globalAnswered(t, f, p, `{"allowed":true,"limit":1,"remaining":0,"reset_ms":2678400000,"retry_after_ms":0,"effective_ms":2678400000}`)
	assert.Equal(t, seenAnswer{t: 31 * 86400}, s, "March: the service is asked, and admits")
}
