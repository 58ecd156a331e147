package filter

import (
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

// The settler (settle.go, settle_global.go, body.go) on the fake host: a rule reserves with the
// request, the answer says the cost, and the stream's end settles the difference.

// left is what the key has left of rule's first limit: what a check of cost 1 (which consumes
// nothing) would leave, plus that 1.
func left(t *testing.T, f *fakeHost, p *pluginContext, rule, key string) int64 {
	t.Helper()
	rs := ruleNamed(p.rules, rule)
	out, err := p.limiter.Check(rs.tables[0], []byte(key), f.now(), 1)
	require.NoError(t, err)
	return out.Decisions[0].Remaining + 1
}

func settleRule(cost string) string {
	return `{"rules":[{"name":"tokens","key":[{"header":"x-user"}],"limits":[{"rate":"1000/d"}],"cost":` + cost + `}]}`
}

// sseSmall settles from the events of at most 64 bytes; bigEvent is one past that, with a usage.
const (
	sseSmall = `{"default":10,"max":500,"max_body":64,"settle":{"response_json":"usage.total_tokens"}}`
	bigEvent = "data: {\"output\":\"" + "0123456789012345678901234567890123456789012345678901234567890123" + "\",\"usage\":{\"total_tokens\":300}}\n\n"
)

const fromHeader = `{"default":10,"max":500,"settle":{"response_header":"x-cost"}}`

func TestAReservationSettlesToTheCostTheAnswerSays(t *testing.T) {
	for _, tc := range []struct {
		name, cost string
		status     string
		respHdr    [][2]string
		body       []string // response body chunks; the last ends the stream
		left       int64
		metric     string
	}{
		{"a header below the reservation refunds the rest", fromHeader, "200", [][2]string{{"x-cost", "4"}}, nil, 996, "meshlimit.rule.tokens.settle_refund"},
		{"a header above it charges the over-run", fromHeader, "200", [][2]string{{"x-cost", "30"}}, nil, 970, "meshlimit.rule.tokens.settle_overrun"},
		{"a header above max is capped", fromHeader, "200", [][2]string{{"x-cost", "9000"}}, nil, 500, "meshlimit.rule.tokens.settled"},
		{"no header charges max", fromHeader, "200", nil, nil, 500, "meshlimit.rule.tokens.settle_kept"},
		{"no header keeps the reservation with on_missing reservation", `{"default":10,"max":500,"settle":{"response_header":"x-cost","on_missing":"reservation"}}`,
			"200", nil, nil, 990, "meshlimit.rule.tokens.settle_kept"},
		{"a 5xx refunds it", fromHeader, "503", [][2]string{{"x-cost", "30"}}, nil, 1000, "meshlimit.rule.tokens.settle_refund"},
		{"a 5xx keeps it with on_error keep", `{"default":10,"max":500,"settle":{"response_header":"x-cost","on_error":"keep"}}`, "503", nil, nil, 990, ""},
		{"a JSON field of the response settles it", `{"default":10,"max":500,"settle":{"response_json":"usage.total_tokens"}}`, "200",
			[][2]string{{"content-type", "application/json"}}, []string{`{"usage":{"total_`, `tokens":42}}`}, 958, "meshlimit.rule.tokens.settle_overrun"},
		{"a JSON body larger than max_body charges max", `{"default":10,"max":500,"max_body":16,"settle":{"response_json":"usage.total_tokens"}}`, "200",
			[][2]string{{"content-type", "application/json"}}, []string{`{"usage":{"total_tokens":42}}`}, 500, "meshlimit.rule.tokens.settle_kept"},
		{"an event stream without usage charges max", `{"default":10,"max":500,"settle":{"response_json":"usage.total_tokens"}}`, "200",
			[][2]string{{"content-type", "text/event-stream"}}, []string{"data: {\"choices\":[]}\n\n", "data: [DONE]\n\n"}, 500, "meshlimit.rule.tokens.settle_kept"},
		{"the last usage of an event stream settles it", `{"default":10,"max":500,"settle":{"response_json":"usage.total_tokens"}}`, "200",
			[][2]string{{"content-type", "text/event-stream"}}, []string{"data: {\"usage\":{\"total_tokens\":3}}\n\n", "data: {\"usage\":{\"total_tokens\":7}}\n\n"}, 993, "meshlimit.rule.tokens.settle_refund"},
		{"a JSON usage of NaN is no usage: charged max, never 0", `{"default":10,"max":500,"settle":{"response_json":"usage.total_tokens"}}`, "200",
			[][2]string{{"content-type", "application/json"}}, []string{`{"usage":{"total_tokens":NaN}}`}, 500, "meshlimit.rule.tokens.settle_kept"},
		{"an event's usage of NaN is no usage: charged max, never 0", `{"default":10,"max":500,"settle":{"response_json":"usage.total_tokens"}}`, "200",
			[][2]string{{"content-type", "text/event-stream"}}, []string{"data: {\"usage\":{\"total_tokens\":NaN}}\n\n", "data: [DONE]\n\n"}, 500, "meshlimit.rule.tokens.settle_kept"},
		{"a NaN usage keeps the reservation with on_missing reservation", `{"default":10,"max":500,"settle":{"response_json":"usage.total_tokens","on_missing":"reservation"}}`, "200",
			[][2]string{{"content-type", "application/json"}}, []string{`{"usage":{"total_tokens":NaN}}`}, 990, "meshlimit.rule.tokens.settle_kept"},
		{"an event over max_body after an early usage makes the usage unknown: charged max", sseSmall, "200",
			[][2]string{{"content-type", "text/event-stream"}}, []string{"data: {\"usage\":{\"total_tokens\":3}}\n\n", bigEvent, "data: [DONE]\n\n"}, 500, "meshlimit.rule.tokens.settle_kept"},
		{"an event over max_body ending the stream makes the usage unknown: charged max", sseSmall, "200",
			[][2]string{{"content-type", "text/event-stream"}}, []string{"data: {\"usage\":{\"total_tokens\":3}}\n\n", bigEvent}, 500, "meshlimit.rule.tokens.settle_kept"},
		{"a usage after an event over max_body settles it", sseSmall, "200",
			[][2]string{{"content-type", "text/event-stream"}}, []string{"data: {\"usage\":{\"total_tokens\":3}}\n\n", bigEvent, "data: {\"usage\":{\"total_tokens\":7}}\n\n"}, 993, "meshlimit.rule.tokens.settle_refund"},
		{"the response's bytes settle it", `{"default":10,"max":500,"settle":{"body_bytes":"response"}}`, "200",
			nil, []string{"12345", "678"}, 992, "meshlimit.rule.tokens.settle_refund"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeHost(t)
			p := f.start(settleRule(tc.cost))
			h, act := f.open(p, user("u"), true)
			require.Equal(t, types.ActionContinue, act)
			assert.Equal(t, int64(990), left(t, f, p, "tokens", "u"), "the default is reserved")
			f.respond(h, append([][2]string{{":status", tc.status}}, tc.respHdr...), len(tc.body) == 0)
			for i, c := range tc.body {
				f.responseBody(h, c, i == len(tc.body)-1)
			}
			f.end(h)
			assert.Equal(t, tc.left, left(t, f, p, "tokens", "u"))
			if tc.metric != "" {
				assert.Positive(t, f.counter(tc.metric))
			} else {
				assert.Zero(t, f.counter("meshlimit.rule.tokens.settle_refund"), "nothing refunded")
			}
		})
	}
}

func TestAReservationSettlingFromJSONAsksTheUpstreamForAnUncompressedAnswer(t *testing.T) {
	f := newFakeHost(t)
	p := f.start(settleRule(`{"default":10,"max":500,"settle":{"response_json":"usage.total_tokens"}}`))
	h, _ := f.open(p, fakeReq("/", [2]string{"x-user", "u"}, [2]string{"accept-encoding", "gzip"}), true)
	ae, _ := pairValue(f.of(h).req, "accept-encoding")
	assert.Equal(t, "identity", ae)
	f.end(h)
}

func TestAnEventStreamCutShortChargesAnOverRunButNeverRefunds(t *testing.T) {
	for _, tc := range []struct {
		name  string
		event string
		left  int64
	}{
		{"an early usage below the reservation is not taken: max is charged", `data: {"usage":{"total_tokens":2}}` + "\n\n", 500},
		{"a usage above it is charged", `data: {"usage":{"total_tokens":25}}` + "\n\n", 975},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeHost(t)
			p := f.start(settleRule(`{"default":10,"max":500,"settle":{"response_json":"usage.total_tokens"}}`))
			h, _ := f.open(p, user("u"), true)
			f.respond(h, [][2]string{{":status", "200"}, {"content-type", "text/event-stream"}}, false)
			f.responseBody(h, tc.event, false)
			f.end(h) // the client left
			assert.Equal(t, tc.left, left(t, f, p, "tokens", "u"))
		})
	}
}

func TestAnEventStreamEndedByTrailersSettlesFromItsLastEvent(t *testing.T) {
	f := newFakeHost(t)
	p := f.start(settleRule(`{"default":10,"max":500,"settle":{"response_json":"usage.total_tokens"}}`))
	h, _ := f.open(p, user("u"), true)
	f.respond(h, [][2]string{{":status", "200"}, {"content-type", "text/event-stream"}}, false)
	f.responseBody(h, `data: {"usage":{"total_tokens":4}}`, false) // no blank line: the trailers end it
	f.responseTrailers(h)
	f.end(h)
	assert.Equal(t, int64(996), left(t, f, p, "tokens", "u"))
}

func TestADeniedRequestRefundsWhatItsEarlierRulesReserved(t *testing.T) {
	f := newFakeHost(t)
	keep := `{"default":10,"max":500,"settle":{"response_header":"x-cost","on_missing":"reservation"}}`
	p := f.start(`{"rules":[{"name":"tokens","key":[{"header":"x-user"}],"limits":[{"rate":"1000/d"}],"cost":` + keep + `},` +
		`{"name":"gate","limits":[{"rate":"1/h"}]}]}`)
	a, _ := f.open(p, user("u"), true)
	f.end(a)
	b, act := f.open(p, user("u"), true)
	require.Equal(t, types.ActionPause, act, "the gate denies")
	f.end(b)
	assert.Equal(t, int64(990), left(t, f, p, "tokens", "u"), "only the first request's reservation is kept")
}

const fromBody = `{"request_json":"max_tokens","default":100,"max":500,"max_body":64,"settle":{"response_json":"usage.total_tokens"}}`

func TestARuleReservesWhatTheRequestBodySays(t *testing.T) {
	for _, tc := range []struct {
		name   string
		chunks []string
		left   int64 // after the body stage
		bad    int64
	}{
		{"a body that says 300 reserves 300", []string{`{"max_tok`, `ens": 300}`}, 700, 0},
		{"a body that is not JSON reserves the default", []string{`not json`}, 900, 1},
		{"a body over max_body reserves the default", []string{strings.Repeat(" ", 70) + `{"max_tokens": 3}`}, 900, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeHost(t)
			p := f.start(settleRule(fromBody))
			h, act := f.open(p, user("u"), false)
			require.Equal(t, types.ActionContinue, act, "the headers go on; the body decides")
			for i, c := range tc.chunks {
				last := i == len(tc.chunks)-1
				act = f.requestBody(h, c, last)
				if !last {
					assert.Equal(t, types.ActionPause, act, "held until it ends")
				}
			}
			assert.Equal(t, types.ActionContinue, act)
			assert.Equal(t, tc.left, left(t, f, p, "tokens", "u"))
			assert.Equal(t, tc.bad, f.counter("meshlimit.rule.tokens.bad_body"))
			f.end(h)
		})
	}
}

func TestABodyReservationThatDoesNotFitIsDenied(t *testing.T) {
	f := newFakeHost(t)
	p := f.start(settleRule(fromBody))
	h, _ := f.open(p, user("u"), false)
	require.Equal(t, types.ActionContinue, f.requestBody(h, `{"max_tokens": 500}`, true))
	h2, _ := f.open(p, user("u"), false)
	require.Equal(t, types.ActionContinue, f.requestBody(h2, `{"max_tokens": 500}`, true))
	h3, _ := f.open(p, user("u"), false)
	assert.Equal(t, types.ActionPause, f.requestBody(h3, `{"max_tokens": 1}`, true), "the day's 1000 are reserved")
	require.NotNil(t, f.of(h3).reply)
	for _, h := range []*httpContext{h, h2, h3} {
		f.end(h)
	}
}

func TestARequestWhoseBodyNeverEndsIsChargedItsDefaultWhenTheStreamEnds(t *testing.T) {
	f := newFakeHost(t)
	p := f.start(settleRule(fromBody))
	h, _ := f.open(p, user("u"), false)
	f.requestBody(h, `{"max_tokens"`, false)
	f.end(h)
	assert.Equal(t, int64(900), left(t, f, p, "tokens", "u"))
	assert.Equal(t, int64(1), f.counter("meshlimit.rule.tokens.settle_kept"))
}

func TestRequestTrailersDecideARuleThatWaitedForTheBody(t *testing.T) {
	f := newFakeHost(t)
	p := f.start(settleRule(fromBody))
	h, _ := f.open(p, user("u"), false)
	f.requestBody(h, `{"max_tokens": 250}`, false)
	assert.Equal(t, types.ActionContinue, f.requestTrailers(h))
	assert.Equal(t, int64(750), left(t, f, p, "tokens", "u"), "the body the trailers ended says 250")
	f.end(h)
}

// Global reservations.

func TestAGlobalReservationIsSettledWithTheServiceWhenTheStreamEnds(t *testing.T) {
	f := newFakeHost(t)
	p := f.start(globalWith(``, `{"name":"tokens","scope":"global","key":[{"header":"x-user"}],"limits":[{"rate":"1000/d"}],"cost":`+fromHeader+`}`))
	h, _ := f.open(p, user("u"), true)
	f.answerCall(f.callOf(h), "200", checkAnswer(true, 990, 0))
	f.respond(h, [][2]string{{":status", "200"}, {"x-cost", "25"}}, true)
	f.end(h)
	calls := f.pending()
	require.Len(t, calls, 1, "one settle call")
	assert.Contains(t, calls[0].body, `{"settle":[`)
	assert.Contains(t, calls[0].body, `"delta":15`)
	f.answerCall(calls[0], "503", ``) // the stream is gone: the answer is dropped, as Envoy drops it
	assert.Zero(t, f.counter("meshlimit.rule.tokens.settle_call_failed"))
}

func TestAGlobalRuleThatReadsTheBodyCallsTheServiceWithTheBody(t *testing.T) {
	f := newFakeHost(t)
	p := f.start(globalWith(``, `{"name":"tokens","scope":"global","key":[{"header":"x-user"}],"limits":[{"rate":"1000/d"}],"cost":`+fromBody+`},`+
		`{"name":"per-user","scope":"global","key":[{"header":"x-user"}],"limits":[{"rate":"10/m"}]}`))
	h, act := f.open(p, user("u"), false)
	require.Equal(t, types.ActionPause, act, "the rule that reads no body is decided with the headers")
	headers := f.callOf(h)
	assert.NotContains(t, headers.body, "/tokens/")
	f.answerCall(headers, "200", checkAnswer(true, 9, 0))
	assert.Equal(t, 1, f.of(h).resumed[requestPart])
	assert.Equal(t, types.ActionPause, f.requestBody(h, `{"max_tokens": 40}`, true), "paused at the body for its call")
	body := f.callOf(h)
	assert.Contains(t, body.body, `"cost":40`)
	assert.Equal(t, types.ActionPause, f.requestBody(h, ``, true), "a chunk while the call is out is held")
	f.answerCall(body, "200", checkAnswer(true, 960, 0))
	assert.Equal(t, 2, f.of(h).resumed[requestPart])
	f.end(h)
}

func TestASettleNotSentWhileTheBreakerIsOpenIsCounted(t *testing.T) {
	f := newFakeHost(t)
	p := f.start(globalWith(``, `{"name":"tokens","scope":"global","key":[{"header":"x-user"}],"limits":[{"rate":"1000/d"}],"cost":`+fromHeader+`}`))
	h, _ := f.open(p, user("u"), true)
	f.answerCall(f.callOf(h), "200", checkAnswer(true, 990, 0))
	for range 2 { // two failures open the breaker
		o, _ := f.open(p, user("o"), true)
		f.answerCall(f.callOf(o), "", "")
		f.end(o)
	}
	f.respond(h, [][2]string{{":status", "200"}, {"x-cost", "25"}}, true)
	f.end(h)
	assert.Empty(t, f.pending())
	assert.Equal(t, int64(1), f.counter("meshlimit.rule.tokens.settle_call_failed"))
}

func TestStreamsPastTheVMsSettleMemorySettleWithoutACopyAndAreChargedMax(t *testing.T) {
	f := newFakeHost(t)
	p := f.start(`{"settle_memory":65536,"rules":[{"name":"tokens","key":[{"header":"x-user"}],"limits":[{"rate":"1000/d"}],
		"cost":{"default":10,"max":500,"settle":{"response_json":"usage.total_tokens"}}}]}`)
	chunk := `{"usage":{"total_tokens":7},"pad":"` + strings.Repeat("x", 30000) + `"`
	var open []*httpContext
	for _, u := range []string{"a", "b", "c"} { // slow readers: their answers never end while the others come
		h, act := f.open(p, user(u), true)
		require.Equal(t, types.ActionContinue, act)
		f.respond(h, [][2]string{{":status", "200"}, {"content-type", "application/json"}}, false)
		f.responseBody(h, chunk, false)
		open = append(open, h)
	}
	assert.Equal(t, int64(1), f.counter("meshlimit.settle_copy_refused"), "two copies of 30,000 fit 65,536; the third does not")
	for _, h := range open {
		f.responseBody(h, "}", true)
		f.end(h)
	}
	assert.Equal(t, int64(993), left(t, f, p, "tokens", "a"), "a copied its answer and settled to its usage")
	assert.Equal(t, int64(993), left(t, f, p, "tokens", "b"))
	assert.Equal(t, int64(500), left(t, f, p, "tokens", "c"), "c settled without a copy: charged max")
	h, _ := f.open(p, user("d"), true) // the memory came back: d copies again
	f.respond(h, [][2]string{{":status", "200"}, {"content-type", "application/json"}}, false)
	f.responseBody(h, chunk+"}", true)
	f.end(h)
	assert.Equal(t, int64(993), left(t, f, p, "tokens", "d"))
	assert.Equal(t, int64(1), f.counter("meshlimit.settle_copy_refused"))
}

func TestEnvoysOwn504AfterTheUpstreamWorkedKeepsTheReservationWhateverOnError(t *testing.T) {
	for _, tc := range []struct {
		name, details string
		left          int64
	}{
		{"the upstream's own 503 is refunded", "via_upstream", 1000},
		{"Envoy's timeout after the model worked keeps it", "upstream_response_timeout", 990},
		{"a reset once the upstream had the request keeps it", "upstream_reset_before_response_started{remote_reset}", 990},
		{"no upstream took the request: refunded", "upstream_reset_before_response_started{connection_failure}", 1000},
		{"no healthy upstream: refunded", "no_healthy_upstream", 1000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeHost(t)
			p := f.start(settleRule(fromHeader))
			h, _ := f.open(p, user("u"), true)
			f.props[string(codeDetailsPath)] = tc.details
			status := "504"
			if tc.details == "via_upstream" || tc.details == "no_healthy_upstream" {
				status = "503"
			}
			f.respond(h, [][2]string{{":status", status}}, true)
			f.end(h)
			assert.Equal(t, tc.left, left(t, f, p, "tokens", "u"))
		})
	}
}

func TestAStreamRefusedACopyForWantOfSettleMemoryIsChargedMaxWhateverOnMissingSays(t *testing.T) {
	for _, onMissing := range []string{"max", "reservation"} {
		t.Run(onMissing, func(t *testing.T) {
			f := newFakeHost(t)
			p := f.start(`{"settle_memory":65536,"rules":[{"name":"tokens","key":[{"header":"x-user"}],"limits":[{"rate":"1000/d"}],
				"cost":{"default":10,"max":500,"settle":{"response_json":"usage.total_tokens","on_missing":"` + onMissing + `"}}}]}`)
			hold, _ := f.open(p, user("mallory"), true) // a slow reader: its event stream holds max_body, all of settle_memory
			f.respond(hold, [][2]string{{":status", "200"}, {"content-type", "text/event-stream"}}, false)
			f.responseBody(hold, "data: {}\n\n", false)
			h, _ := f.open(p, user("alice"), true)
			f.respond(h, [][2]string{{":status", "200"}, {"content-type", "text/event-stream"}}, false)
			f.responseBody(h, "data: {\"usage\":{\"total_tokens\":300}}\n\n", true)
			f.end(h)
			assert.Equal(t, int64(1), f.counter("meshlimit.settle_copy_refused"))
			assert.Equal(t, int64(500), left(t, f, p, "tokens", "alice"), "its usage unread: charged max, not its reservation of 10")
			f.end(hold)
		})
	}
}

func TestAClientsSlowReadersTakeOnlyItsKeysShareOfSettleMemory(t *testing.T) {
	f := newFakeHost(t)
	p := f.start(`{"settle_memory":1048576,"rules":[{"name":"tokens","key":[{"header":"x-user"}],"limits":[{"rate":"100000/d"}],
		"cost":{"default":10,"max":500,"settle":{"response_json":"usage.total_tokens"}}}]}`)
	var held []*httpContext
	for range 20 { // one key's share is 1/16 of 1 MiB: one event stream of max_body (65536)
		h, _ := f.open(p, user("mallory"), true)
		f.respond(h, [][2]string{{":status", "200"}, {"content-type", "text/event-stream"}}, false)
		f.responseBody(h, "data: {}\n\n", false)
		held = append(held, h)
	}
	assert.Equal(t, int64(19), f.counter("meshlimit.settle_copy_refused"), "mallory's streams past its key's share")
	for _, u := range []string{"alice", "bob"} {
		h, _ := f.open(p, user(u), true)
		f.respond(h, [][2]string{{":status", "200"}, {"content-type", "text/event-stream"}}, false)
		f.responseBody(h, "data: {\"usage\":{\"total_tokens\":300}}\n\n", true)
		f.end(h)
		assert.Equal(t, int64(100000-300), left(t, f, p, "tokens", u), "%s's settlement is exact", u)
	}
	assert.Equal(t, int64(19), f.counter("meshlimit.settle_copy_refused"), "no honest stream refused")
	for _, h := range held {
		f.responseBody(h, "data: {\"usage\":{\"total_tokens\":1}}\n\n", true)
		f.end(h)
	}
	assert.Equal(t, int64(100000-1-19*500), left(t, f, p, "tokens", "mallory"), "its one copied stream settles to 1, the 19 refused to max")
	h, _ := f.open(p, user("mallory"), true) // its share came back
	f.respond(h, [][2]string{{":status", "200"}, {"content-type", "text/event-stream"}}, false)
	f.responseBody(h, "data: {\"usage\":{\"total_tokens\":2}}\n\n", true)
	f.end(h)
	assert.Equal(t, int64(19), f.counter("meshlimit.settle_copy_refused"))
}

func TestASlowReaderOfManyKeysLosesItsCopiesToANewcomersWhenSettleMemoryIsFull(t *testing.T) {
	f := newFakeHost(t)
	p := f.start(`{"settle_memory":4194304,"rules":[{"name":"tokens","key":[{"header":"x-user"}],"limits":[{"rate":"100000/d"}],
		"cost":{"default":10,"max":500,"settle":{"response_json":"usage.total_tokens"}}}]}`)
	var held []*httpContext
	for i := range 80 { // 20 keys of 4 streams: 64 copies of max_body (65536) fill 4 MiB
		h, _ := f.open(p, user("mallory"+strconv.Itoa(i%20)), true)
		f.respond(h, [][2]string{{":status", "200"}, {"content-type", "text/event-stream"}}, false)
		f.responseBody(h, "data: {\"usage\":{\"total_tokens\":1}}\n\n", false)
		held = append(held, h)
	}
	assert.Equal(t, int64(16), f.counter("meshlimit.settle_copy_refused"), "the memory holds 64 of the 80")
	for _, u := range []string{"alice", "bob"} {
		h, _ := f.open(p, user(u), true)
		f.respond(h, [][2]string{{":status", "200"}, {"content-type", "text/event-stream"}}, false)
		f.responseBody(h, "data: {\"usage\":{\"total_tokens\":300}}\n\n", true)
		f.end(h)
		assert.Equal(t, int64(100000-300), left(t, f, p, "tokens", u), "%s's settlement is exact: a key holding more lost a copy", u)
	}
	assert.Equal(t, int64(17), f.counter("meshlimit.settle_copy_refused"), "one of mallory's copies evicted for alice; bob's fit when alice's ended")
	for _, h := range held {
		f.responseBody(h, "data: [DONE]\n\n", true)
		f.end(h)
	}
	charged := int64(0)
	for k := range 20 {
		charged += 100000 - left(t, f, p, "tokens", "mallory"+strconv.Itoa(k))
	}
	assert.Equal(t, int64(63*1+17*500), charged, "its 63 copied streams settle to their usage, the 17 refused or evicted to max")
}
