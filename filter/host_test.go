package filter

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

// The host port's own contracts, on the fake.

// anyRule is a rule that never denies.
const anyRule = `{"name":"any","limits":[{"rate":"1000000000/s"}]}`

const perIP1h = `{"rules":[{"name":"per-ip","key":["client_ip"],"limits":[{"rate":"1/h"}]}]}`

func TestALocalReplyTheHostRefusesResumesTheRequestInstead(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cfg     string
		deny    func(f *fakeHost, p *pluginContext) *httpContext
		resumed int
	}{
		{"a request denied at its headers goes on", perIP1h, func(f *fakeHost, p *pluginContext) *httpContext {
			f.open(p, fakeReq("/"), true) // spends the quota
			f.replyErr = errors.New("refused")
			h, act := f.open(p, fakeReq("/"), true)
			assert.Equal(t, types.ActionPause, act, "the callback stops; the host's resume follows it")
			return h
		}, 1},
		{"a request the service denies while it is paused goes on", globalRule(`"scope":"global"`), func(f *fakeHost, p *pluginContext) *httpContext {
			h, _ := f.open(p, fakeReq("/", [2]string{"x-user", "u"}), true)
			f.replyErr = errors.New("refused")
			f.answerCall(f.callTo("/v1/check"), "200", checkAnswer(false, 0, 1000))
			return h
		}, 1},
		{"a shed request goes on", `{"rules":[` + anyRule + `],"shed":{"capacity":1,"classes":[{"name":"only"}],"default_class":"only"}}`, func(f *fakeHost, p *pluginContext) *httpContext {
			f.open(p, fakeReq("/"), true) // holds the one slot
			f.replyErr = errors.New("refused")
			h, _ := f.open(p, fakeReq("/"), true)
			return h
		}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeHost(t)
			p := f.start(tc.cfg)
			h := tc.deny(f, p)
			s := f.of(h)
			assert.Nil(t, s.reply, "no reply was sent")
			assert.Equal(t, tc.resumed, s.resumed[requestPart], "the request is resumed once")
			assert.Len(t, f.logged(logError, "sending the local response: refused; the request goes on"), 1)
		})
	}
}

func TestACounterIsNeverIncrementedByZeroAndAGaugeIsSetNotAdded(t *testing.T) {
	f := newFakeHost(t)
	c := newCounter(f, "c")
	c.inc(0) // the fake fails the test on an increment by 0
	c.inc(3)
	c.s.flush()
	c.s.flush() // nothing moved since: no call
	assert.Equal(t, int64(3), f.counter("c"))
	g := newGauge(f, "g")
	g.set(7)
	g.set(4)
	g.set(4)
	assert.Equal(t, int64(4), f.counter("g"))
}

func TestAPluginThatCannotReadItsConfigurationOrSetItsTimerDoesNotStart(t *testing.T) {
	for _, tc := range []struct {
		name, cfg, log string
		refuse         fakeRefusals
	}{
		{"the configuration cannot be read", perIP1h, "reading the plugin configuration", fakeRefusals{config: errors.New("no")}},
		{"the timer cannot be set", `{"rules":[{"name":"r","limits":[{"rate":"5/s","algorithm":"leaky_bucket"}]}]}`, "need a timer", fakeRefusals{tick: errors.New("no")}},
		{"the configuration is invalid", `{"rules":[{"name":"r","limits":[{"rate":"10/parsec"}]}]}`, `rules[0].limits[0].rate`, fakeRefusals{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeHost(t)
			f.refuse = tc.refuse
			_, status := f.startStatus(tc.cfg)
			assert.Equal(t, types.OnPluginStartStatusFailed, status)
			assert.Len(t, f.logged(logCritical, tc.log), 1, "%v", f.logs)
		})
	}
}

func TestAPluginWithoutAPluginNameNamespacesItsKeysAsDefault(t *testing.T) {
	f := newFakeHost(t)
	delete(f.props, "plugin_name")
	p := f.start(perIP1h)
	assert.Equal(t, "default", p.name)
	_, _, err := f.Get("meshlimit/default/sentinel")
	require.NoError(t, err, "the sentinel is under the default name")
}

func TestThePluginAsksForTheTimerItsFeaturesNeed(t *testing.T) {
	for _, tc := range []struct {
		name, cfg string
		want      uint32
	}{
		{"a plain rate limit's timer only flushes the counters", perIP1h, statsFlushMillis},
		{"a leaky bucket releases held requests every 5 ms", `{"rules":[{"name":"r","limits":[{"rate":"5/s","algorithm":"leaky_bucket"}]}]}`, shapeTickMillis},
		{"a global service checks deadlines and leases every 20 ms", globalRule(`"scope":"global"`), leaseTickMillis},
		{"concurrency permits renew every second", `{"rules":[{"name":"c","limits":[{"concurrency":5}]}]}`, 1000},
		{"an adaptive shedder runs at its interval", `{"rules":[` + anyRule + `],"shed":{"adaptive":{"interval":"100ms"}}}`, 100},
		{"a leaky bucket's period serves the permits too", `{"rules":[{"name":"c","limits":[{"concurrency":5}]},{"name":"r","limits":[{"rate":"5/s","algorithm":"leaky_bucket"}]}]}`, shapeTickMillis},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeHost(t)
			f.start(tc.cfg)
			assert.Equal(t, tc.want, f.tick)
		})
	}
}

// perIPMany is a per-IP rule that admits every request of a test.
const perIPMany = `{"rules":[{"name":"per-ip","key":["client_ip"],"limits":[{"rate":"1000/s"}]}]}`

func TestCountersKeptInTheGuestReachTheHostOnTheNextTick(t *testing.T) {
	f := newFakeHost(t)
	p := f.start(perIPMany)
	f.open(p, fakeReq("/"), true)
	f.open(p, fakeReq("/"), true)
	assert.Zero(t, f.hostCounter("meshlimit.rule.per-ip.allowed"), "a request makes no host call for its counts")
	f.tickNow(p)
	assert.Equal(t, int64(2), f.hostCounter("meshlimit.rule.per-ip.allowed"), "the tick flushes them")
	f.tickNow(p)
	assert.Equal(t, int64(2), f.hostCounter("meshlimit.rule.per-ip.allowed"), "and only once")
}

func TestCountersFlushWhenThePluginStopsOrStartsAgain(t *testing.T) {
	f := newFakeHost(t)
	p := f.start(perIPMany)
	f.open(p, fakeReq("/"), true)
	p.OnPluginDone()
	assert.Equal(t, int64(1), f.hostCounter("meshlimit.rule.per-ip.allowed"), "at plugin done")

	f.open(p, fakeReq("/"), true)
	require.Equal(t, types.OnPluginStartStatusOK, p.OnPluginStart(0))
	assert.Equal(t, int64(2), f.hostCounter("meshlimit.rule.per-ip.allowed"), "at a reconfiguration")

	_, status := f.startStatus(`{"rules": "not a list"}`)
	require.Equal(t, types.OnPluginStartStatusFailed, status)
	assert.Equal(t, int64(1), f.hostCounter("meshlimit.config_errors"), "a refused start, which gets no tick, flushes at once")
}

func TestWithoutATimerEachStreamsEndFlushesTheCounters(t *testing.T) {
	f := newFakeHost(t)
	f.refuse.tick = errors.New("no timer")
	p := f.start(perIPMany)
	h, _ := f.open(p, fakeReq("/"), true)
	f.end(h)
	assert.Equal(t, int64(1), f.hostCounter("meshlimit.rule.per-ip.allowed"))
	assert.Len(t, f.logged(logWarn, "no timer for the counters' flush"), 1)
}
