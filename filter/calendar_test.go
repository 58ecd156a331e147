package filter

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/meshlimit/meshlimit/internal/sfv"
)

// policyParam returns parameter name of the first member of the structured field v.
func policyParam(t *testing.T, v, name string) int64 {
	t.Helper()
	ps, err := sfv.ParsePolicies(v)
	require.NoError(t, err, v)
	require.NotEmpty(t, ps, v)
	return ps[0].Params[name]
}

// TestAMonthlyQuotaRenewsOnTheFirstAndItsWIsTheMonthsLength spends a "2/month" quota on 31 January
// at 23:59 UTC: the policy's w is January's 31 days, the denial's t and Retry-After the minute left;
// a minute later it is February, the quota is back and w is 28 days.
func TestAMonthlyQuotaRenewsOnTheFirstAndItsWIsTheMonthsLength(t *testing.T) {
	const day = 86400
	f := newFakeHost(t)
	f.clock = time.Date(2026, 1, 31, 23, 59, 0, 0, time.UTC).UnixNano()
	p := f.start(`{"rules":[{"name":"plan","key":["client_ip"],"limits":[{"rate":"2/month"}]}]}`)
	admitted := func() (w, r int64) {
		t.Helper()
		h, act := f.open(p, fakeReq("/"), true)
		require.Equal(t, types.ActionContinue, act)
		f.respond(h, [][2]string{{":status", "200"}}, true)
		pol, _ := pairValue(f.of(h).resp, "ratelimit-policy")
		rl, _ := pairValue(f.of(h).resp, "ratelimit")
		f.end(h)
		return policyParam(t, pol, "w"), policyParam(t, rl, "r")
	}
	w, r := admitted()
	assert.Equal(t, [2]int64{31 * day, 1}, [2]int64{w, r})
	admitted()
	h, act := f.open(p, fakeReq("/"), true)
	require.Equal(t, types.ActionPause, act)
	reply := f.of(h).reply
	require.NotNil(t, reply)
	pol, _ := pairValue(reply.headers, "ratelimit-policy")
	rl, _ := pairValue(reply.headers, "ratelimit")
	retry, _ := pairValue(reply.headers, "retry-after")
	assert.Equal(t, int64(31*day), policyParam(t, pol, "w"))
	assert.Equal(t, int64(60), policyParam(t, rl, "t"), "the month ends in a minute")
	assert.Equal(t, "60", retry)
	f.end(h)

	f.advance(time.Minute)
	w, r = admitted()
	assert.Equal(t, [2]int64{28 * day, 1}, [2]int64{w, r}, "February 2026 has 28 days, and a fresh quota")
}

// TestPastTwoToThe52MicrosecondsTimeStopsAndASpentCalendarQuotaStaysSpent: the algorithms count
// time in microseconds below 2^52 (2112-09-17T23:53:47Z) so that Lua's doubles compute the same; a
// later clock is taken as that instant (docs/configuration.md, calendar quotas): a period no
// longer ends, so a spent quota is not renewed (never open), and t stays at least 1.
func TestPastTwoToThe52MicrosecondsTimeStopsAndASpentCalendarQuotaStaysSpent(t *testing.T) {
	f := newFakeHost(t)
	f.clock = time.Date(2113, 3, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	p := f.start(`{"rules":[{"name":"plan","key":["client_ip"],"limits":[{"rate":"1/month"}]}]}`)
	h, act := f.open(p, fakeReq("/"), true)
	require.Equal(t, types.ActionContinue, act, "the first request of the quota")
	f.respond(h, [][2]string{{":status", "200"}}, true)
	pol, _ := pairValue(f.of(h).resp, "ratelimit-policy")
	assert.Equal(t, int64(30*86400), policyParam(t, pol, "w"), "the period of the stopped instant: September 2112")
	f.end(h)
	for _, later := range []time.Duration{0, 31 * 24 * time.Hour, 400 * 24 * time.Hour} {
		f.advance(later)
		h, act := f.open(p, fakeReq("/"), true)
		require.Equal(t, types.ActionPause, act, "still denied %v later", later)
		rl, _ := pairValue(f.of(h).reply.headers, "ratelimit")
		assert.GreaterOrEqual(t, policyParam(t, rl, "t"), int64(1))
		f.end(h)
	}
}
