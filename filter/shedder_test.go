package filter

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/meshlimit/meshlimit/shed"
)

// The shedder (shed.go) on the fake host.

func shedConfig(shed string) string {
	return `{"rules":[` + anyRule + `],"shed":` + shed + `}`
}

func priority(p string) [][2]string { return fakeReq("/", [2]string{"x-priority", p}) }

func TestTheShedderAnswersA503WhenTheCapacityIsHeld(t *testing.T) {
	f := newFakeHost(t)
	p := f.start(shedConfig(`{"capacity":1,"classes":[{"name":"only"}],"default_class":"only","retry_after":"2s","retry_after_jitter":"0s"}`))
	a, act := f.open(p, fakeReq("/"), true)
	require.Equal(t, types.ActionContinue, act)
	b, act := f.open(p, fakeReq("/"), true)
	require.Equal(t, types.ActionPause, act)
	r := f.of(b).reply
	assert.Equal(t, uint32(503), r.status)
	retry, _ := pairValue(r.headers, "retry-after")
	assert.Equal(t, "2", retry)
	assert.Contains(t, string(r.body), "temporary-reduced-capacity")
	assert.Equal(t, int64(1), f.counter("meshlimit.shed.only.shed"))
	f.end(b)
	f.end(a)
	c, act := f.open(p, fakeReq("/"), true)
	assert.Equal(t, types.ActionContinue, act, "the ended stream gave its slot back")
	f.end(c)
}

func TestAShedRequestGivesBackThePermitsItsRulesTook(t *testing.T) {
	f := newFakeHost(t)
	p := f.start(`{"rules":[{"name":"gpu","limits":[{"concurrency":1}]}],"shedders":[{"name":"s","capacity":1,"classes":[{"name":"only"}],"default_class":"only","match":{"path":{"prefix":"/shed/"}}}]}`)
	held, _ := f.open(p, fakeReq("/other"), true) // the permit, but no slot: the shedder does not match
	f.end(held)
	a, _ := f.open(p, fakeReq("/shed/a"), true) // a permit and the one slot
	f.end(a)
	b, _ := f.open(p, fakeReq("/shed/b"), true)
	c, act := f.open(p, fakeReq("/shed/c"), true)
	require.Equal(t, types.ActionPause, act, "gpu's permit is b's")
	f.end(c)
	f.end(b)
	d, act := f.open(p, fakeReq("/shed/d"), true)
	assert.Equal(t, types.ActionContinue, act)
	e, act := f.open(p, fakeReq("/shed/e"), true)
	assert.Equal(t, types.ActionPause, act)
	assert.Empty(t, e.permits, "the shed (or denied) request holds no permit")
	f.end(e)
	f.end(d)
}

func TestAShadowShedderCountsWhatItWouldShedAndShedsNothing(t *testing.T) {
	f := newFakeHost(t)
	p := f.start(shedConfig(`{"capacity":1,"shadow":true,"classes":[{"name":"only"}],"default_class":"only"}`))
	a, _ := f.open(p, fakeReq("/"), true)
	b, act := f.open(p, fakeReq("/"), true)
	assert.Equal(t, types.ActionContinue, act)
	assert.Equal(t, int64(1), f.counter("meshlimit.shed.only.shadow_shed"))
	f.end(a)
	f.end(b)
}

func TestTheLowestClassIsShedFirst(t *testing.T) {
	f := newFakeHost(t)
	p := f.start(shedConfig(`{"capacity":10,"class_header":"x-priority"}`))
	var open []*httpContext
	admitted := 0
	for {
		h, act := f.open(p, priority("sheddable"), true)
		open = append(open, h)
		if act == types.ActionPause {
			break
		}
		admitted++
	}
	assert.Less(t, admitted, 10, "sheddable is shed before the capacity is reached")
	h, act := f.open(p, priority("critical"), true)
	assert.Equal(t, types.ActionContinue, act, "critical keeps its reserve")
	for _, h := range append(open, h) {
		f.end(h)
	}
}

func TestTheTimerRenewsTheShedderSlotsAndReportsThemInFlight(t *testing.T) {
	f := newFakeHost(t)
	p := f.start(shedConfig(`{"capacity":5,"classes":[{"name":"only"}],"default_class":"only"}`))
	require.Equal(t, uint32(1000), f.tick)
	a, _ := f.open(p, fakeReq("/"), true)
	b, _ := f.open(p, fakeReq("/"), true)
	f.advance(2 * time.Second)
	f.tickNow(p)
	assert.Equal(t, int64(2), f.counter("meshlimit.shed.only.in_flight"))
	assert.Equal(t, int64(5), f.counter("meshlimit.shed.capacity"))
	f.end(a)
	f.end(b)
	f.advance(2 * time.Second)
	f.tickNow(p)
	assert.Zero(t, f.counter("meshlimit.shed.only.in_flight"))
}

func TestAnAdaptiveShedderLearnsItsCapacityFromTheUpstreamsLatency(t *testing.T) {
	f := newFakeHost(t)
	p := f.start(shedConfig(`{"class_header":"x-priority","adaptive":{"interval":"100ms","probe_samples":3}}`))
	require.Equal(t, uint32(100), f.tick)
	initial := f.counter("meshlimit.shed.capacity")
	require.Positive(t, initial)
	for range 50 { // a slow upstream: 500 ms per request, ten at a time
		var open []*httpContext
		for range 10 {
			h, act := f.open(p, priority("critical"), true)
			if act == types.ActionContinue {
				open = append(open, h)
			}
		}
		f.advance(500 * time.Millisecond)
		for _, h := range open {
			f.respond(h, [][2]string{{":status", "200"}}, true)
			f.end(h)
		}
		f.tickNow(p)
	}
	assert.NotEqual(t, initial, f.counter("meshlimit.shed.capacity"), "the controller moved the capacity")
	v, _, err := f.Get("meshlimit/test.meshlimit/shed/gradient")
	require.NoError(t, err)
	assert.NotEmpty(t, v, "its state is shared")
}

func TestOnlyTheFirstMatchingShedderOfTheListGovernsARequest(t *testing.T) {
	f := newFakeHost(t)
	p := f.start(`{"rules":[` + anyRule + `],"shedders":[` +
		`{"name":"api","match":{"path":{"prefix":"/api/"}},"capacity":1,"classes":[{"name":"only"}],"default_class":"only"},` +
		`{"name":"all","capacity":100,"classes":[{"name":"only"}],"default_class":"only"}]}`)
	a, _ := f.open(p, fakeReq("/api/a"), true)
	b, act := f.open(p, fakeReq("/api/b"), true)
	assert.Equal(t, types.ActionPause, act, "the api shedder holds one")
	c, act := f.open(p, fakeReq("/web"), true)
	assert.Equal(t, types.ActionContinue, act, "the other path is the second shedder's")
	assert.Equal(t, int64(1), f.counter("meshlimit.shed.api.only.shed"))
	assert.Equal(t, int64(1), f.counter("meshlimit.shed.all.only.admitted"))
	for _, h := range []*httpContext{a, b, c} {
		f.end(h)
	}
}

func TestAShedSlotIsGivenBackWhenTheResponseHeadersArriveNotAtTheStreamsEnd(t *testing.T) {
	f := newFakeHost(t)
	p := f.start(shedConfig(`{"capacity":1,"classes":[{"name":"only"}],"default_class":"only"}`))
	a, act := f.open(p, fakeReq("/"), true)
	require.Equal(t, types.ActionContinue, act)
	f.respond(a, [][2]string{{":status", "200"}}, false) // the answer streams on
	b, act := f.open(p, fakeReq("/"), true)
	assert.Equal(t, types.ActionContinue, act, "a started answer holds no slot")
	f.end(a)
	f.end(b)
}

func TestAnswersAreClassifiedByWhoAnsweredAndTheirStatus(t *testing.T) {
	tests := []struct {
		name, status, details string
		want                  shed.Answer
	}{
		{"an upstream's 200 did work", "200", "via_upstream", shed.Served},
		{"an upstream's 304 did work", "304", "via_upstream", shed.Served},
		{"an upstream's 404 is refused", "404", "via_upstream", shed.Refused},
		{"an upstream's 503 is refused", "503", "via_upstream", shed.Refused},
		{"the router's 504 on a timeout is local", "504", "upstream_response_timeout", shed.Local},
		{"another filter's local 403 is local", "403", "ext_authz_denied", shed.Local},
		{"a host without code details is classified by status", "200", "", shed.Served},
		{"a status out of range is local", "99", "via_upstream", shed.Local},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeHost(t)
			p := f.start(shedConfig(`{"adaptive":{}}`))
			h, act := f.open(p, fakeReq("/"), true)
			require.Equal(t, types.ActionContinue, act)
			if tt.details != "" {
				f.props[string(codeDetailsPath)] = tt.details
			}
			st := f.of(h)
			st.resp = [][2]string{{":status", tt.status}}
			f.cur = st
			got := p.sheds.answer()
			f.leave()
			assert.Equal(t, tt.want, got)
			f.end(h)
		})
	}
}

func TestAKeyAtItsShareIsShedAndGetsItsSlotBackWhenAStreamAnswers(t *testing.T) {
	f := newFakeHost(t)
	p := f.start(shedConfig(`{"capacity":10,"key_share":200}`)) // 2 slots per client address
	a, act := f.open(p, fakeReq("/"), true)
	require.Equal(t, types.ActionContinue, act)
	b, act := f.open(p, fakeReq("/"), true)
	require.Equal(t, types.ActionContinue, act)
	c, act := f.open(p, fakeReq("/"), true)
	assert.Equal(t, types.ActionPause, act, "the third stream of the address is over its share")
	assert.Equal(t, uint32(503), f.of(c).reply.status)
	assert.Equal(t, int64(1), f.counter("meshlimit.shed.key_limited"))
	f.end(c)
	f.respond(a, [][2]string{{":status", "200"}}, false)
	d, act := f.open(p, fakeReq("/"), true)
	assert.Equal(t, types.ActionContinue, act, "the answered stream gave its key's slot back")
	for _, h := range []*httpContext{a, b, d} {
		f.end(h)
	}
}

func TestAnUploadsLatencySampleStartsWhenItsRequestEnds(t *testing.T) {
	for _, tc := range []struct {
		name    string
		end     func(f *fakeHost, h *httpContext)
		wantMin time.Duration
	}{
		{"a request without a body is timed from its admission", nil, time.Second},
		{"a body trickled for a second is timed from its last byte", func(f *fakeHost, h *httpContext) { f.requestBody(h, "x", true) }, 0},
		{"a body ended by trailers is timed from them", func(f *fakeHost, h *httpContext) { f.requestTrailers(h) }, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeHost(t)
			p := f.start(shedConfig(`{"adaptive":{"interval":"100ms"}}`))
			h, act := f.open(p, fakeReq("/upload"), tc.end == nil)
			require.Equal(t, types.ActionContinue, act)
			f.clock += int64(time.Second)
			if tc.end != nil {
				f.requestBody(h, "x", false)
				f.clock += int64(time.Second)
				tc.end(f, h)
			}
			f.clock += int64(5 * time.Millisecond)
			f.respond(h, [][2]string{{":status", "200"}}, true)
			local := &p.sheds.list[0].local
			require.Equal(t, int64(1), local.Count())
			assert.GreaterOrEqual(t, local.Max(), tc.wantMin)
			assert.Less(t, local.Max(), tc.wantMin+10*time.Millisecond, "the upload time is not the upstream's")
			f.end(h)
		})
	}
}
