package filter

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

// assertCleared requires that a recycled stream holds nothing of the stream before it: only the
// arrays kept for the next stream, emptied, and no element of them reaching an old rule.
func assertCleared(t *testing.T, s *stream, cfg string) {
	t.Helper()
	assert.Zero(t, s.id, cfg)
	assert.Zero(t, s.calls, cfg)
	assert.Equal(t, callStream{}, s.call, cfg)
	assert.Nil(t, s.settle, cfg)
	assert.Nil(t, s.permits, cfg)
	assert.Equal(t, shedSlot{}, s.shed, cfg)
	assert.Nil(t, s.quota.outcomes, cfg)
	assert.Empty(t, s.quota.inline[0].Limit, cfg)
	for _, o := range s.quota.spare[:cap(s.quota.spare)] {
		assert.Nil(t, o.Limit, cfg)
	}
	assert.False(t, s.planned, cfg)
	for _, c := range s.charges.list[:cap(s.charges.list)] {
		assert.Nil(t, c.rs, cfg)
	}
	assert.Empty(t, s.charges.list, cfg)
	assert.False(t, s.charges.waiting, cfg)
	for _, tk := range s.taken.list[:cap(s.taken.list)] {
		assert.Nil(t, tk.rs, cfg)
	}
	assert.Nil(t, s.msgs.rule, cfg)
	assert.Zero(t, s.msgs.proto, cfg)
}

func TestARecycledContextKeepsNothingOfTheStreamThatUsedItWhateverItsFeatures(t *testing.T) {
	for _, cfg := range []string{
		`{"rules": [{"name": "ip", "key": ["client_ip"], "limits": [{"rate": "100/s"}]}]}`,
		`{"rules": [{"name": "ip", "key": ["client_ip"], "limits": [{"rate": "100/s"}, {"rate": "1000/m"}, {"rate": "9000/h"}]}]}`,
		`{"rules": [{"name": "ip", "key": ["client_ip"], "limits": [{"rate": "100/s"}], "count_on": {"status": ["401"], "penalty": "1m"}}]}`,
		`{"rules": [{"name": "ip", "key": ["client_ip"], "limits": [{"rate": "100/s"}], "cost": {"default": 1, "max": 100, "settle": {"response_header": "x-cost"}}}]}`,
	} {
		f := newFakeHost(t)
		p := f.start(cfg)
		h, _ := f.open(p, fakeReq("/"), true)
		f.respond(h, [][2]string{{":status", "401"}, {"x-cost", "3"}}, false)
		f.responseBody(h, "ok", true)
		f.end(h)
		require.Contains(t, p.free, h, cfg)
		assertCleared(t, &h.stream, cfg)
		again, _ := f.open(p, fakeReq("/"), true)
		assert.Same(t, h, again, "the next stream reuses the context")
		assert.Equal(t, again.id, f.next)
	}
}

func TestOnlyARuleThatALaterDecisionMayOverruleRecordsItsTakes(t *testing.T) {
	rate := func(name string) string {
		return `{"name":"` + name + `","key":["client_ip"],"limits":[{"rate":"100/s"}]}`
	}
	shed := `"shedders":[{"name":"s","capacity":1,"classes":[{"name":"only"}],"default_class":"only","match":{"path":{"prefix":"/shed/"}}}]`
	for cfg, want := range map[string][]bool{
		`{"rules":[` + rate("a") + `]}`:                                {false},
		`{"rules":[` + rate("a") + `,` + rate("b") + `]}`:              {true, false},
		`{"rules":[` + rate("a") + `],` + shed + `}`:                   {true},
		`{"rules":[` + rate("a") + `,` + rate("b") + `],` + shed + `}`: {true, true},
	} {
		p := newFakeHost(t).start(cfg)
		var got []bool
		for i := range p.rules {
			got = append(got, p.rules[i].givesBack)
		}
		assert.Equal(t, want, got, cfg)
	}
	t.Run("the last rule's take is recorded when a later one may deny", func(t *testing.T) {
		f := newFakeHost(t)
		p := f.start(`{"rules":[` + rate("a") + `,{"name":"b","key":["client_ip"],"limits":[{"rate":"1/h"}]}]}`)
		f.open(p, fakeReq("/"), true)
		h, _ := f.open(p, fakeReq("/"), true)
		require.NotNil(t, f.of(h).reply, "b denies the second request")
		assert.Equal(t, int64(1), f.counter("meshlimit.rule.a.given_back"), "and a's take is given back")
	})
}

func TestAStreamThePlanDecidedIsClearedWhateverConfigurationItEndsUnder(t *testing.T) {
	local := `{"rules": [{"name": "ip", "key": ["client_ip"], "limits": [{"rate": "100/s"}, {"rate": "1000/m"}, {"rate": "9000/h"}]}]}`
	counted := `{"rules": [{"name": "ip", "key": ["client_ip"], "limits": [{"rate": "100/s"}], "count_on": {"status": ["401"], "penalty": "1m"}}]}`
	for _, next := range []string{local, counted} {
		f := newFakeHost(t)
		p := f.start(local)
		h, _ := f.open(p, fakeReq("/"), true)
		require.True(t, h.planned)
		f.cfg = []byte(next)
		require.Equal(t, types.OnPluginStartStatusOK, p.OnPluginStart(0))
		f.respond(h, [][2]string{{":status", "401"}}, true)
		f.end(h)
		require.Contains(t, p.free, h, next)
		assertCleared(t, &h.stream, next)
	}
}
