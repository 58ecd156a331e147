package filter

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/meshlimit/meshlimit/sharedstate"
	"github.com/meshlimit/meshlimit/wire"
)

// Concurrency permits, local (concurrency.go) and global (global_concurrency.go), on the fake host.

const twoSlots = `{"rules":[{"name":"gpu","key":[{"header":"x-user"}],"limits":[{"concurrency":2}]}]}`

func TestAConcurrencyLimitAdmitsOnlyWhatItHoldsUntilAStreamEnds(t *testing.T) {
	f := newFakeHost(t)
	p := f.start(twoSlots)
	a, act := f.open(p, user("u"), true)
	require.Equal(t, types.ActionContinue, act)
	b, act := f.open(p, user("u"), true)
	require.Equal(t, types.ActionContinue, act)
	c, act := f.open(p, user("u"), true)
	assert.Equal(t, types.ActionPause, act, "a third stream finds no permit")
	assert.Equal(t, uint32(429), f.of(c).reply.status)
	other, act := f.open(p, user("v"), true)
	assert.Equal(t, types.ActionContinue, act, "another key has its own permits")
	f.end(c)
	f.end(a)
	d, act := f.open(p, user("u"), true)
	assert.Equal(t, types.ActionContinue, act, "the ended stream gave its permit back")
	for _, h := range []*httpContext{b, d, other} {
		f.end(h)
	}
	assert.Zero(t, p.permits.held[heldPermit{rule: 0, key: "u"}], "nothing held")
}

func TestAPermitTakenForARequestALaterRuleDeniesIsGivenBackAtOnce(t *testing.T) {
	f := newFakeHost(t)
	p := f.start(`{"rules":[{"name":"gpu","limits":[{"concurrency":1}]},{"name":"rate","match":{"path":{"prefix":"/limited"}},"limits":[{"rate":"1/h"}]}]}`)
	a, _ := f.open(p, fakeReq("/limited"), true)
	f.end(a)
	b, act := f.open(p, fakeReq("/limited"), true)
	require.Equal(t, types.ActionPause, act, "the rate rule denies the second")
	assert.Empty(t, b.permits)
	c, act := f.open(p, fakeReq("/"), true)
	assert.Equal(t, types.ActionContinue, act, "the denied request's permit came back")
	f.end(c)
}

func TestAShadowConcurrencyLimitCountsWhatItWouldRefuseAndReleasesIt(t *testing.T) {
	f := newFakeHost(t)
	p := f.start(`{"rules":[{"name":"gpu","shadow":true,"limits":[{"concurrency":1}]}]}`)
	a, _ := f.open(p, fakeReq("/"), true)
	b, act := f.open(p, fakeReq("/"), true)
	assert.Equal(t, types.ActionContinue, act)
	assert.Equal(t, int64(1), f.counter("meshlimit.rule.gpu.shadow_limited"))
	assert.Len(t, b.permits, 1, "counted, so that it is released like the others")
	f.end(a)
	f.end(b)
	c, _ := f.open(p, fakeReq("/"), true)
	assert.Zero(t, f.counter("meshlimit.rule.gpu.shadow_limited")-1, "both were released")
	f.end(c)
}

func TestTheTimerRenewsThePermitsAndReclaimsThoseOfAnOwnerThatStopped(t *testing.T) {
	f := newFakeHost(t)
	dead := f.start(twoSlots) // a worker that dies holding two permits
	f.open(dead, user("u"), true)
	f.open(dead, user("u"), true)
	live := f.start(twoSlots)
	h, act := f.open(live, user("u"), true)
	require.Equal(t, types.ActionPause, act, "the dead worker's permits still count")
	f.end(h)
	for range 5 { // 10 s of renewals by the live worker only
		f.advance(2 * time.Second)
		f.tickNow(live)
	}
	h, act = f.open(live, user("u"), true)
	assert.Equal(t, types.ActionContinue, act, "the dead owner's lease ended")
	assert.Equal(t, int64(2), f.counter("meshlimit.rule.gpu.permits_reclaimed"))
	f.end(h)
}

func TestAReleaseThatLosesEveryRaceIsRepairedByTheNextRenewal(t *testing.T) {
	f := newFakeHost(t)
	p := f.start(twoSlots)
	a, _ := f.open(p, user("u"), true)
	b, _ := f.open(p, user("u"), true)
	records := p.records
	p.records = sharedstate.NewCursor(contendedUpdater(f, "meshlimit/test.meshlimit/gpu/"))
	f.end(a) // its release cannot be written
	assert.Equal(t, int64(1), f.counter("meshlimit.rule.gpu.cas_exhausted"))
	p.records = records
	f.advance(2 * time.Second)
	f.tickNow(p) // the renewal writes what this worker holds: one permit
	c, act := f.open(p, user("u"), true)
	assert.Equal(t, types.ActionContinue, act)
	f.end(b)
	f.end(c)
}

func TestKeysWithoutRoomShareTheOverflowPermits(t *testing.T) {
	f := newFakeHost(t)
	p := f.start(`{"rules":[{"name":"gpu","max_keys":1,"key":[{"header":"x-user"}],"limits":[{"concurrency":1}]}]}`)
	a, _ := f.open(p, user("a"), true)
	b, act := f.open(p, user("b"), true)
	require.Equal(t, types.ActionContinue, act, "b takes the overflow's one permit")
	assert.Equal(t, int64(1), f.counter("meshlimit.rule.gpu.overflow"))
	c, act := f.open(p, user("c"), true)
	assert.Equal(t, types.ActionPause, act, "c shares the overflow with b")
	f.end(b)
	d, act := f.open(p, user("d"), true)
	assert.Equal(t, types.ActionContinue, act, "b's overflow permit came back")
	for _, h := range []*httpContext{a, c, d} {
		f.end(h)
	}
}

// Global concurrency limits.

// permitAnswer is the service's answer to a renew or release call; lost has bit i set when renew
// entry i was not renewed.
func permitAnswer(lost uint64) string {
	return string(wire.AppendAnswerEndPermits(wire.AppendAnswerStart(nil, true), 1, 0, lost))
}

const globalSlots = `{"name":"gpu","scope":"global","key":[{"header":"x-user"}],"limits":[{"concurrency":50}]}`

func TestAGlobalPermitIsAskedForWithTheCheckHeldByTheStreamAndReleasedAtItsEnd(t *testing.T) {
	f := newFakeHost(t)
	p := f.start(globalWith(``, globalSlots))
	h, _ := f.open(p, user("u"), true)
	check := f.callOf(h)
	assert.Contains(t, check.body, `"permit":"`)
	f.answerCall(check, "200", checkAnswer(true, 49, 0))
	require.Len(t, p.global.permits.held[h.id], 1)

	f.advance(time.Second)
	f.tickNow(p)
	renew := f.pending()
	require.Len(t, renew, 1, "the tick renews the stream's permit")
	assert.Contains(t, renew[0].body, `"renew"`)
	f.answerCall(renew[0], "200", permitAnswer(0))

	f.end(h)
	release := f.pending()
	require.Len(t, release, 1, "the stream's end releases it")
	assert.Contains(t, release[0].body, `"release"`)
	assert.Empty(t, p.global.permits.held)
	assert.Equal(t, int64(2), f.counter("meshlimit.global.permit_calls"))
}

func TestARenewalThatFindsItsPermitGoneForgetsIt(t *testing.T) {
	f := newFakeHost(t)
	p := f.start(globalWith(``, globalSlots))
	h, _ := f.open(p, user("u"), true)
	f.answerCall(f.callOf(h), "200", checkAnswer(true, 49, 0))
	f.advance(time.Second)
	f.tickNow(p)
	f.answerCall(f.pending()[0], "200", permitAnswer(1))
	assert.Equal(t, int64(1), f.counter("meshlimit.global.permits_lost"))
	assert.Empty(t, p.global.permits.held, "no longer renewed")
	f.end(h)
	assert.Empty(t, f.pending(), "nothing to release")
}

func TestAFailedCheckReleasesWhatItMayHaveAcquiredTwoTimeoutsLater(t *testing.T) {
	f := newFakeHost(t)
	p := f.start(globalWith(``, globalSlots))
	h, _ := f.open(p, user("u"), true)
	f.answerCall(f.callOf(h), "503", `{"error":"store"}`)
	f.advance(399 * time.Millisecond)
	f.tickNow(p)
	assert.Empty(t, f.pending())
	f.advance(time.Millisecond)
	f.tickNow(p)
	rel := f.pending()
	require.Len(t, rel, 1)
	assert.Contains(t, rel[0].body, `"release"`)
	f.answerCall(rel[0], "503", ``)
	assert.Equal(t, int64(1), f.counter("meshlimit.global.permit_failures"))
	f.end(h)
}

func TestAStreamThatLeavesBeforeItsCheckIsAnsweredReleasesWhatTheCheckMayAcquire(t *testing.T) {
	f := newFakeHost(t)
	p := f.start(globalWith(``, globalSlots))
	h, _ := f.open(p, user("u"), true)
	f.end(h)
	f.advance(400 * time.Millisecond)
	f.tickNow(p)
	var rel []*fakeCall
	for _, c := range f.pending() {
		if strings.Contains(c.body, `"release"`) {
			rel = append(rel, c)
		}
	}
	assert.Len(t, rel, 1)
}

func TestWhileTheBreakerIsOpenAGlobalConcurrencyRuleTakesItsLocalFallbackPermits(t *testing.T) {
	f := newFakeHost(t)
	p := f.start(globalWith(``, `{"name":"gpu","scope":"global","limits":[{"concurrency":50}],"fallback":[{"concurrency":1}]}`))
	f.refuse.dispatch = errors.New("BadArgument")
	a, act := f.open(p, fakeReq("/"), true)
	require.Equal(t, types.ActionContinue, act, "the local fallback's permit")
	require.Len(t, a.permits, 1)
	b, act := f.open(p, fakeReq("/"), true)
	assert.Equal(t, types.ActionPause, act, "the fallback holds one")
	f.end(a)
	f.end(b)
	c, act := f.open(p, fakeReq("/"), true)
	assert.Equal(t, types.ActionContinue, act, "the ended stream gave it back")
	f.end(c)
	assert.Empty(t, f.pending(), "no release is sent while the breaker is open")
}
