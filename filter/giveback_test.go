package filter

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

// A request denied by a later rule gives back what the earlier rules took (giveback.go).

func TestARequestDeniedByALaterRuleSpendsNothingOfAnEarlierOne(t *testing.T) {
	for _, alg := range []string{"token_bucket", "leaky_bucket", "fixed_window", "sliding_log", "sliding_window"} {
		t.Run(alg, func(t *testing.T) {
			f := newFakeHost(t)
			p := f.start(fmt.Sprintf(`{"rules":[
				{"name":"ra","key":["path"],"limits":[{"rate":"2/m","algorithm":%q}]},
				{"name":"rb","key":[{"header":"x-user"}],"limits":[{"rate":"1/m"}]}]}`, alg))
			req := func(u string) [][2]string { return fakeReq("/x", [2]string{"x-user", u}) }
			steps := []struct {
				user   string
				denied bool
			}{
				{"u1", false}, // ra 1/2, rb(u1) 1/1
				{"u1", true},  // denied by rb: ra's unit is given back
				{"u1", true},
				{"u2", false}, // ra 2/2: u1's denials spent none of it
				{"u3", true},  // ra is spent by the two admitted requests alone
			}
			for i, s := range steps {
				h, _ := f.open(p, req(s.user), true)
				assert.Equal(t, s.denied, f.of(h).reply != nil, "request %d (%s) denied", i, s.user)
				f.end(h)
			}
			assert.Equal(t, int64(2), f.counter("meshlimit.rule.ra.given_back"))
		})
	}
}

func TestARequestTheShedderDeniesSpendsNothingOfTheLocalRulesBeforeIt(t *testing.T) {
	for _, tc := range []struct{ name, shed string }{
		{"over capacity", `{"capacity":1,"classes":[{"name":"all","reserve":0}],"default_class":"all"}`},
		{"over its key share", `{"capacity":10,"key_share":100,"share_key":[{"header":"x-user"}],"classes":[{"name":"all","reserve":0}],"default_class":"all"}`},
	} {
		for _, alg := range []string{"token_bucket", "fixed_window", "sliding_log"} {
			t.Run(tc.name+"/"+alg, func(t *testing.T) {
				f := newFakeHost(t)
				p := f.start(fmt.Sprintf(`{"rules":[{"name":"ra","key":["path"],"limits":[{"rate":"3/m","algorithm":%q}]}],
					"shed":%s}`, alg, tc.shed))
				req := func(u string) [][2]string { return fakeReq("/x", [2]string{"x-user", u}) }
				hold, _ := f.open(p, req("mallory"), true) // ra 1/3; holds the shedder's slot (or its key's)
				assert.Nil(t, f.of(hold).reply, "the first request is admitted")
				for i := range 5 {
					h, _ := f.open(p, req("mallory"), true)
					if assert.NotNil(t, f.of(h).reply, "request %d is shed", i) {
						assert.Equal(t, uint32(503), f.of(h).reply.status)
					}
					f.end(h)
				}
				f.cur = nil
				f.respond(hold, [][2]string{{":status", "200"}}, true)
				f.end(hold)
				for i := range 2 { // ra 3/3: the shed requests spent none of it
					h, _ := f.open(p, req("alice"), true)
					assert.Nil(t, f.of(h).reply, "alice's request %d is admitted", i)
					f.respond(h, [][2]string{{":status", "200"}}, true)
					f.end(h)
				}
				assert.Equal(t, int64(5), f.counter("meshlimit.rule.ra.given_back"))
			})
		}
	}
}

func TestARequestItsBudgetDeniesAtTheBodyStageSpendsNothingOfTheHeadersRules(t *testing.T) {
	ra := `{"name":"ra","key":["path"],"limits":[{"rate":"4/m"}]}`
	rb := `{"name":"rb","key":[{"header":"x-user"}],"limits":[{"rate":"1000/d"}],"cost":` + fromBody + `}`
	for _, tc := range []struct{ name, rules string }{
		{"the shared rule first", ra + "," + rb},
		{"the budget first", rb + "," + ra},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeHost(t)
			p := f.start(`{"rules":[` + tc.rules + `]}`)
			send := func(u, body string) bool {
				h, act := f.open(p, user(u), false)
				if act == types.ActionContinue { // the headers went on; the body decides
					f.requestBody(h, body, true)
				}
				denied := f.of(h).reply != nil
				if !denied {
					f.respond(h, [][2]string{{":status", "200"}, {"content-type", "application/json"}}, false)
					f.responseBody(h, `{"usage":{"total_tokens":500}}`, true)
				}
				f.end(h)
				return !denied
			}
			for i := range 2 {
				assert.True(t, send("mallory", `{"max_tokens":500}`), "ra %d/4; mallory's budget spent by its usage of 500", i+1)
			}
			for i := range 4 {
				assert.False(t, send("mallory", `{"max_tokens":1}`), "request %d: over mallory's budget, denied at the body stage", i)
			}
			assert.True(t, send("alice", `{"max_tokens":1}`), "ra 3/4: mallory's denials spent none of it")
			assert.True(t, send("bob", `{"max_tokens":1}`), "ra 4/4")
			assert.False(t, send("carol", `{"max_tokens":1}`), "ra is spent by the three admitted requests alone")
			assert.Equal(t, int64(4), f.counter("meshlimit.rule.ra.given_back"))
		})
	}
}

func TestARequestTheServiceDeniesInItsBodyCallSpendsNothingOfTheLocalRulesBeforeIt(t *testing.T) {
	f := newFakeHost(t)
	p := f.start(globalWith(``, `{"name":"ra","key":["path"],"limits":[{"rate":"1/m"}]},`+
		`{"name":"per-user","scope":"global","key":[{"header":"x-user"}],"limits":[{"rate":"10/m"}]},`+
		`{"name":"tokens","scope":"global","key":[{"header":"x-user"}],"limits":[{"rate":"1000/d"}],"cost":`+fromBody+`}`))
	h, act := f.open(p, user("mallory"), false)
	assert.Equal(t, types.ActionPause, act, "the first call, with the headers")
	f.answerCall(f.callOf(h), "200", checkAnswer(true, 9, 0))
	f.requestBody(h, `{"max_tokens": 40}`, true)
	f.answerCall(f.callOf(h), "200", checkAnswer(false, 0, 60000))
	assert.NotNil(t, f.of(h).reply, "the second call, with the body, denies")
	f.end(h)
	assert.Equal(t, int64(1), f.counter("meshlimit.rule.ra.given_back"))
	assert.Equal(t, int64(1), left(t, f, p, "ra", "/"), "ra's unit is whole again")
}

func TestARequestTheShedderDeniesRefundsItsReservationWhateverOnErrorSays(t *testing.T) {
	f := newFakeHost(t)
	p := f.start(`{"rules":[{"name":"tokens","key":[{"header":"x-user"}],"limits":[{"rate":"1000/d"}],
		"cost":{"default":10,"max":500,"settle":{"response_header":"x-cost","on_error":"keep"}}}],
		"shed":{"capacity":1,"classes":[{"name":"all","reserve":0}],"default_class":"all"}}`)
	hold, _ := f.open(p, user("u"), true) // reserves 10, holds the shedder's one slot
	h, _ := f.open(p, user("u"), true)
	if assert.NotNil(t, f.of(h).reply, "shed") {
		assert.Equal(t, uint32(503), f.of(h).reply.status)
	}
	f.end(h)
	assert.Equal(t, int64(990), left(t, f, p, "tokens", "u"), "the shed request's reservation is refunded")
	f.end(hold)
}
