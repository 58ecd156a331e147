package filter

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/meshlimit/meshlimit/sharedstate"
)

// The rules walk and the local path (decision.go), the local reply and the quota fields
// (reply.go), on the fake host.

func TestALocalRuleDecidesEachRequestOfItsKey(t *testing.T) {
	type req struct {
		headers [][2]string
		want    types.Action
	}
	apiKey := func(v string) [][2]string { return fakeReq("/", [2]string{"x-api-key", v}) }
	for _, tc := range []struct {
		name, cfg string
		reqs      []req
	}{
		{"the third request of a burst of two is denied", `{"rules":[{"name":"r","key":["client_ip"],"limits":[{"rate":"2/h"}]}]}`,
			[]req{{fakeReq("/"), types.ActionContinue}, {fakeReq("/"), types.ActionContinue}, {fakeReq("/"), types.ActionPause}}},
		{"a request without the key's header is not limited", `{"rules":[{"name":"r","key":[{"header":"x-api-key"}],"limits":[{"rate":"1/h"}]}]}`,
			[]req{{fakeReq("/"), types.ActionContinue}, {fakeReq("/"), types.ActionContinue}, {apiKey("k1"), types.ActionContinue}, {apiKey("k1"), types.ActionPause}}},
		{"each key has its own quota", `{"rules":[{"name":"r","key":[{"header":"x-api-key"}],"limits":[{"rate":"1/h"}]}]}`,
			[]req{{apiKey("k1"), types.ActionContinue}, {apiKey("k2"), types.ActionContinue}, {apiKey("k1"), types.ActionPause}}},
		{"a key header repeated with two values is refused", `{"rules":[{"name":"r","key":[{"header":"x-api-key"}],"limits":[{"rate":"100/h"}]}]}`,
			[]req{{fakeReq("/", [2]string{"x-api-key", "a"}, [2]string{"x-api-key", "b"}), types.ActionPause}}},
		{"an unlimited override admits its key forever", `{"rules":[{"name":"r","key":[{"header":"x-api-key"}],"limits":[{"rate":"1/h"}],"overrides":[{"value":"vip","unlimited":true}]}]}`,
			[]req{{apiKey("vip"), types.ActionContinue}, {apiKey("vip"), types.ActionContinue}, {apiKey("vip"), types.ActionContinue}}},
		{"a shadow rule never denies", `{"rules":[{"name":"r","shadow":true,"limits":[{"rate":"1/h"}]}]}`,
			[]req{{fakeReq("/"), types.ActionContinue}, {fakeReq("/"), types.ActionContinue}}},
		{"a rule that does not match is not charged", `{"rules":[{"name":"r","match":{"path":{"prefix":"/api/"}},"limits":[{"rate":"1/h"}]}]}`,
			[]req{{fakeReq("/web"), types.ActionContinue}, {fakeReq("/api/x"), types.ActionContinue}, {fakeReq("/web"), types.ActionContinue}, {fakeReq("/api/y"), types.ActionPause}}},
		{"the first denial stops the walk: a later rule is not charged", `{"rules":[{"name":"a","limits":[{"rate":"1/h"}]},{"name":"b","limits":[{"rate":"2/h"}]}]}`,
			[]req{{fakeReq("/"), types.ActionContinue}, {fakeReq("/"), types.ActionPause}, {fakeReq("/"), types.ActionPause}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeHost(t)
			p := f.start(tc.cfg)
			for i, r := range tc.reqs {
				h, act := f.open(p, r.headers, true)
				assert.Equal(t, r.want, act, "request %d", i)
				if act == types.ActionPause {
					require.NotNil(t, f.of(h).reply, "request %d: a pause is a local reply", i)
				}
				f.end(h)
			}
		})
	}
}

func TestAShadowDenialIsCountedAndTagsTheUpstreamRequest(t *testing.T) {
	f := newFakeHost(t)
	p := f.start(`{"enforce":false,"rules":[{"name":"dark","limits":[{"rate":"1/h"}],"shadow_header":"x-would-limit"}]}`)
	first, _ := f.open(p, fakeReq("/"), true)
	_, tagged := pairValue(f.of(first).req, "x-would-limit")
	assert.False(t, tagged)
	second, act := f.open(p, fakeReq("/"), true)
	assert.Equal(t, types.ActionContinue, act)
	v, _ := pairValue(f.of(second).req, "x-would-limit")
	assert.Equal(t, "dark", v)
	assert.Equal(t, int64(1), f.counter("meshlimit.rule.dark.shadow_limited"))
}

func TestADeniedRequestIsToldWhyInTheReplyAndInFilterState(t *testing.T) {
	f := newFakeHost(t)
	p := f.start(`{"response":{"explain_header":"x-limited-by"},"rules":[{"name":"per-user","key":[{"header":"x-user"}],"limits":[{"rate":"1/h","name":"hourly"}]}]}`)
	f.open(p, user("ann"), true)
	h, _ := f.open(p, user("ann"), true)
	s := f.of(h)
	require.NotNil(t, s.reply)
	assert.Equal(t, uint32(429), s.reply.status)
	by, _ := pairValue(s.reply.headers, "x-limited-by")
	assert.Equal(t, "per-user", by)
	retry, _ := pairValue(s.reply.headers, "retry-after")
	assert.Equal(t, "3600", retry)
	assert.Equal(t, "per-user", s.props["meshlimit.rule"])
	assert.Equal(t, "hourly", s.props["meshlimit.limit"])
	assert.Equal(t, string(keyHash(nil, "test.meshlimit", "ann")), s.props["meshlimit.key_hash"])
}

func TestAnAdmittedRequestReportsItsQuotaOnTheResponseUnlessTurnedOff(t *testing.T) {
	for _, tc := range []struct {
		name, cfg string
		want      bool
	}{
		{"by default", `{"rules":[{"name":"r","limits":[{"rate":"10/h"}]}]}`, true},
		{"with three limits, more than a context keeps inline", `{"rules":[{"name":"r","limits":[{"rate":"10/m"},{"rate":"100/h"},{"rate":"1000/d"}]}]}`, true},
		{"quota_headers_on_allowed false", `{"response":{"quota_headers_on_allowed":false},"rules":[{"name":"r","limits":[{"rate":"10/h"}]}]}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeHost(t)
			p := f.start(tc.cfg)
			for range 2 { // the second stream reuses the first's context
				h, _ := f.open(p, fakeReq("/"), true)
				assert.Equal(t, types.ActionContinue, f.respond(h, [][2]string{{":status", "200"}}, true))
				_, ok := pairValue(f.of(h).resp, "ratelimit")
				assert.Equal(t, tc.want, ok)
				f.end(h)
			}
		})
	}
}

func TestALeakyBucketHoldsTheRequestUntilItsTurnAndDropsOneWhoseClientLeft(t *testing.T) {
	f := newFakeHost(t)
	p := f.start(`{"rules":[{"name":"r","limits":[{"rate":"10/s","algorithm":"leaky_bucket","burst":5}]}]}`)
	first, act := f.open(p, fakeReq("/"), true)
	assert.Equal(t, types.ActionContinue, act, "the first request has no wait")
	second, act := f.open(p, fakeReq("/"), true)
	require.Equal(t, types.ActionPause, act, "the second waits its turn")
	third, _ := f.open(p, fakeReq("/"), true)
	gone := f.of(third)
	f.end(third) // its client leaves while it is held
	f.tickNow(p)
	assert.Zero(t, f.of(second).resumed[requestPart], "not yet")
	f.advance(100_000_000)
	f.tickNow(p)
	assert.Equal(t, 1, f.of(second).resumed[requestPart], "resumed at its turn")
	f.advance(100_000_000)
	f.tickNow(p)
	assert.Zero(t, gone.resumed[requestPart], "a stream gone is dropped")
	assert.Empty(t, p.shaper.held)
	f.end(first)
}

func TestARuleWhoseUpdatesAllLoseTheirRaceAppliesItsFailureMode(t *testing.T) {
	for _, tc := range []struct {
		name, mode string
		want       types.Action
	}{
		{"allow lets the request through", "allow", types.ActionContinue},
		{"deny denies it", "deny", types.ActionPause},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeHost(t)
			p := f.start(`{"rules":[{"name":"r","failure_mode":"` + tc.mode + `","limits":[{"rate":"10/h"}]}]}`)
			p.limiter = sharedstate.NewLimiter(contendedUpdater(f, "meshlimit/test.meshlimit/r/"))
			_, act := f.open(p, fakeReq("/"), true)
			assert.Equal(t, tc.want, act)
			assert.Equal(t, int64(1), f.counter("meshlimit.rule.r.cas_exhausted"))
			assert.Equal(t, int64(sharedstate.DefaultMaxAttempts-1), f.counter("meshlimit.rule.r.cas_retries"))
		})
	}
}
