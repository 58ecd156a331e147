package filter

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

// The leaser (lease.go) on the fake host.

const leased = `"scope":"global","lease":{"batch":5,"ttl":"1h"}`

// leaseCall returns the one unanswered lease call: a /v1/check from the plugin's context.
func leaseCall(t *testing.T, f *fakeHost) *fakeCall {
	t.Helper()
	var out []*fakeCall
	for _, c := range f.pending() {
		if c.stream == nil && strings.Contains(c.body, `"cost":5`) {
			out = append(out, c)
		}
	}
	require.Len(t, out, 1, "one lease call")
	return out[0]
}

// firstAndLease runs one request of u, which the service admits and which asks for a lease, then
// the tick that dispatches the lease.
func firstAndLease(t *testing.T, f *fakeHost, p *pluginContext, u string) *fakeCall {
	t.Helper()
	h, _ := f.open(p, user(u), true)
	f.answerCall(f.callTo("/v1/check"), "200", checkAnswer(true, 9, 0))
	f.end(h)
	f.tickNow(p)
	return leaseCall(t, f)
}

func TestLeasedUnitsAdmitRequestsWithoutACallUntilTheyRunOut(t *testing.T) {
	f := newFakeHost(t)
	p := f.start(globalRule(leased))
	f.answerCall(firstAndLease(t, f, p, "gina"), "200", checkAnswer(true, 4, 0))
	assert.Equal(t, int64(5), f.counter("meshlimit.rule.per-user.leased"))
	for i := range 5 {
		h, act := f.open(p, user("gina"), true)
		assert.Equal(t, types.ActionContinue, act, "request %d", i)
		f.end(h)
	}
	assert.Empty(t, f.pending(), "five requests spent five leased units")
	assert.Equal(t, int64(5), f.counter("meshlimit.rule.per-user.lease_spent"))
	h, act := f.open(p, user("gina"), true)
	assert.Equal(t, types.ActionPause, act, "the sixth asks the service")
	f.end(h)
}

func TestAWorkerClaimsNoLeaseWhileAnotherIsInFlight(t *testing.T) {
	f := newFakeHost(t)
	p := f.start(globalRule(leased))
	firstAndLease(t, f, p, "hal") // in flight
	h, _ := f.open(p, user("hal"), true)
	f.answerCall(f.callOf(h), "200", checkAnswer(true, 8, 0))
	f.end(h)
	f.tickNow(p)
	assert.Len(t, f.pending(), 1, "the lease in flight is the only one")
}

func TestARefusedBatchStopsLeasingForTheKeyUntilItsRetryAfter(t *testing.T) {
	f := newFakeHost(t)
	p := f.start(globalRule(leased))
	f.answerCall(firstAndLease(t, f, p, "ida"), "200", checkAnswer(false, 2, 30000))
	assert.Zero(t, f.counter("meshlimit.rule.per-user.leased"))
	h, _ := f.open(p, user("ida"), true)
	f.answerCall(f.callTo("/v1/check"), "200", checkAnswer(true, 1, 0))
	f.end(h)
	f.tickNow(p)
	assert.Empty(t, f.pending(), "no lease within the Retry-After")
	f.advance(30 * time.Second)
	h, _ = f.open(p, user("ida"), true)
	f.answerCall(f.callTo("/v1/check"), "200", checkAnswer(true, 1, 0))
	f.end(h)
	f.tickNow(p)
	leaseCall(t, f) // asked again
}

func TestAFailedLeaseEndsTheLeaseInFlightAndCountsTowardsTheBreaker(t *testing.T) {
	for _, tc := range []struct {
		name, status, metric string
	}{
		{"a 503 is a failure", "503", "meshlimit.global.failures"},
		{"a 4xx is a refusal", "400", "meshlimit.global.rejected"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeHost(t)
			p := f.start(globalRule(leased))
			f.answerCall(firstAndLease(t, f, p, "jan"), tc.status, `{"error":"x"}`)
			assert.Equal(t, int64(1), f.counter(tc.metric))
			h, _ := f.open(p, user("jan"), true)
			f.answerCall(f.callTo("/v1/check"), "200", checkAnswer(true, 1, 0))
			f.end(h)
			f.tickNow(p)
			leaseCall(t, f) // the lease in flight was ended: another may be claimed
		})
	}
}

func TestALeaseTheClusterRefusesIsEndedAtOnce(t *testing.T) {
	f := newFakeHost(t)
	p := f.start(globalRule(leased))
	h, _ := f.open(p, user("kai"), true)
	f.answerCall(f.callTo("/v1/check"), "200", checkAnswer(true, 9, 0))
	f.end(h)
	f.refuse.dispatch = errors.New("BadArgument")
	f.tickNow(p)
	assert.Equal(t, int64(1), f.counter("meshlimit.global.failures"))
	assert.Zero(t, f.counter("meshlimit.global.lease_calls"))
	f.refuse.dispatch = nil
	h, _ = f.open(p, user("kai"), true)
	f.answerCall(f.callTo("/v1/check"), "200", checkAnswer(true, 8, 0))
	f.end(h)
	f.tickNow(p)
	leaseCall(t, f)
}

func TestLeasedUnitsExpireUnspentAtTheirTTL(t *testing.T) {
	f := newFakeHost(t)
	p := f.start(globalRule(`"scope":"global","lease":{"batch":5,"ttl":"1s"}`))
	f.answerCall(firstAndLease(t, f, p, "lou"), "200", checkAnswer(true, 4, 0))
	f.advance(time.Second)
	h, act := f.open(p, user("lou"), true)
	assert.Equal(t, types.ActionPause, act, "the expired units admit nothing")
	assert.Equal(t, int64(5), f.counter("meshlimit.rule.per-user.lease_expired"))
	f.end(h)
}
