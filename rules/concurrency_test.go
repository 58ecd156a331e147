package rules

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestAConcurrencyLimitCompilesToItsPermitCount(t *testing.T) {
	c := mustParse(t, `{"rules":[{"name":"gpu","key":[{"header":"x-tenant"}],"limits":[{"concurrency":20,"name":"slots"}]}]}`)
	r := c.Rules()[0]
	spec := r.Concurrency()
	require.NotNil(t, spec)
	assert.Equal(t, int64(20), spec.Concurrency)
	assert.Equal(t, "slots", spec.Name)
	assert.Equal(t, 100, r.EnforcePercent)
	rate := mustParse(t, `{"rules":[{"name":"r","limits":[{"rate":"5/s"}]}]}`)
	assert.Nil(t, rate.Rules()[0].Concurrency(), "a rate rule has no concurrency limit")
}

func TestAConcurrencyRulesOverflowIsThePoolOfTheKeysWithoutRoom(t *testing.T) {
	r := mustParse(t, `{"rules":[{"name":"r","key":[{"header":"x-tenant"}],"limits":[{"concurrency":3}],"overflow":[{"concurrency":200}]}]}`).Rules()[0]
	assert.Equal(t, int64(3), r.Concurrency().Concurrency)
	assert.Equal(t, int64(200), r.OverflowConcurrency().Concurrency)
	plain := mustParse(t, `{"rules":[{"name":"r","limits":[{"concurrency":3}]}]}`).Rules()[0]
	assert.Equal(t, int64(3), plain.OverflowConcurrency().Concurrency, "without overflow, the rule's own limit")
}

func TestConcurrencyConfigErrorsNameTheirField(t *testing.T) {
	tests := []struct {
		name, rule, path string
	}{
		{"a zero concurrency is refused", `"limits":[{"concurrency":0}]`, "rules[0].limits[0].concurrency"},
		{"a concurrency above a million is refused", `"limits":[{"concurrency":1000001}]`, "rules[0].limits[0].concurrency"},
		{"a limit with both rate and concurrency is refused", `"limits":[{"concurrency":5,"rate":"5/s"}]`, "rules[0].limits[0].rate"},
		{"a concurrency limit takes no algorithm", `"limits":[{"concurrency":5,"algorithm":"fixed_window"}]`, "rules[0].limits[0].algorithm"},
		{"a concurrency limit takes no burst", `"limits":[{"concurrency":5,"burst":3}]`, "rules[0].limits[0].burst"},
		{"a concurrency limit is the rule's only limit", `"limits":[{"concurrency":5},{"rate":"5/s"}]`, "rules[0].limits"},
		{"a concurrency rule takes no cost", `"limits":[{"concurrency":5}],"cost":3`, "rules[0].cost"},
		{"a concurrency rule takes no overrides", `"key":["client_ip"],"limits":[{"concurrency":5}],"overrides":[{"value":"192.0.2.1","unlimited":true}]`, "rules[0].overrides"},
		{"a concurrency rule's overflow is no rate", `"limits":[{"concurrency":5}],"overflow":[{"rate":"9/s"}]`, "rules[0].overflow"},
		{"a concurrency rule's overflow is one limit", `"limits":[{"concurrency":5}],"overflow":[{"concurrency":9},{"concurrency":9}]`, "rules[0].overflow"},
		{"a rate rule cannot override with a concurrency limit", `"key":["client_ip"],"limits":[{"rate":"5/s"}],"overrides":[{"value":"192.0.2.1","limits":[{"concurrency":2}]}]`, "rules[0].overrides[0].limits[0].concurrency"},
		{"enforce_percent above 100 is refused", `"limits":[{"concurrency":5}],"enforce_percent":101`, "rules[0].enforce_percent"},
		{"a negative enforce_percent is refused", `"limits":[{"rate":"5/s"}],"enforce_percent":-1`, "rules[0].enforce_percent"},
		{"a global rule takes no enforce_percent yet", `"limits":[{"rate":"5/s"}],"scope":"global","enforce_percent":50`, "rules[0].enforce_percent"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseConfig([]byte(`{"rules":[{"name":"r",` + tt.rule + `}]}`))
			require.Error(t, err)
			paths := []string{}
			for _, fe := range fieldErrors(t, err) {
				paths = append(paths, fe.Path)
			}
			assert.Contains(t, paths, tt.path, "%v", err)
		})
	}
}

func TestEnforcePercentPicksAStableShareOfKeys(t *testing.T) {
	c := mustParse(t, `{"rules":[{"name":"r","key":[{"header":"k"}],"limits":[{"rate":"5/s"}],"enforce_percent":30}]}`)
	r := c.Rules()[0]
	n := 0
	for i := range 10000 {
		key := []byte("client-" + strconv.Itoa(i))
		e := r.EnforcedFor(key)
		assert.Equal(t, e, r.EnforcedFor(key), "the same key is always decided the same way")
		assert.Equal(t, e, r.EnforcedForString(string(key)), "a key held as a string is decided the same way")
		if e {
			n++
		}
	}
	assert.InDelta(t, 3000, n, 200, "about 30%% of 10000 keys are enforced")
	all := mustParse(t, `{"rules":[{"name":"r","limits":[{"rate":"5/s"}]}]}`).Rules()[0]
	none := mustParse(t, `{"rules":[{"name":"r","limits":[{"rate":"5/s"}],"enforce_percent":0}]}`).Rules()[0]
	assert.True(t, all.EnforcedFor([]byte("x")))
	assert.False(t, none.EnforcedFor([]byte("x")))
}

func TestRaisingEnforcePercentOnlyAddsKeys(t *testing.T) {
	low := mustParse(t, `{"rules":[{"name":"r","limits":[{"rate":"5/s"}],"enforce_percent":10}]}`).Rules()[0]
	high := mustParse(t, `{"rules":[{"name":"r","limits":[{"rate":"5/s"}],"enforce_percent":60}]}`).Rules()[0]
	for i := range 5000 {
		key := []byte(strconv.Itoa(i))
		if low.EnforcedFor(key) {
			assert.True(t, high.EnforcedFor(key), "key %s enforced at 10%% is enforced at 60%%", key)
		}
	}
}

func TestShedSectionCompiles(t *testing.T) {
	c := mustParse(t, `{"rules":[{"name":"r","limits":[{"rate":"5/s"}]}],
		"shed":{"class_header":"X-Priority","route_classes":{"checkout":"critical"},"capacity":50,"shadow":true,"retry_after":"2s","retry_after_jitter":"0s"}}`)
	s := c.Shedders[0]
	require.NotNil(t, s)
	assert.Equal(t, []string{"critical", "default", "sheddable"}, s.Classes)
	assert.Equal(t, "x-priority", s.ClassHeader)
	assert.Equal(t, int64(50), s.Capacity)
	assert.Nil(t, s.Adaptive)
	assert.True(t, s.Shadow)
	assert.Equal(t, 2*time.Second, s.RetryAfter)
	assert.Equal(t, time.Duration(0), s.RetryAfterJitter)

	a := mustParse(t, `{"rules":[{"name":"r","limits":[{"rate":"5/s"}]}],
		"shed":{"classes":[{"name":"gold","reserve":300},{"name":"rest"}],"default_class":"rest","adaptive":{"objective":"200ms","max_limit":500,"interval":"50ms"}}}`).Shedders[0]
	require.NotNil(t, a.Adaptive)
	assert.Equal(t, 200*time.Millisecond, a.Adaptive.Objective)
	assert.Equal(t, int64(500), a.Adaptive.MaxLimit)
	assert.Equal(t, 50*time.Millisecond, a.Adaptive.Interval)
	assert.Equal(t, 1, a.Policy.Class("rest"))
}

func TestShedClassComesFromTheRouteThenTheHeaderThenTheDefault(t *testing.T) {
	s := mustParse(t, `{"rules":[{"name":"r","limits":[{"rate":"5/s"}]}],
		"shed":{"class_header":"x-priority","route_classes":{"checkout":"critical"},"capacity":5}}`).Shedders[0]
	tests := []struct {
		name, route, header string
		want                int
	}{
		{"a listed route wins over the header", "checkout", "sheddable", 0},
		{"the header names the class elsewhere", "other", "sheddable", 2},
		{"an unknown class is the default", "other", "CRITICAL", 1},
		{"no header is the default", "other", "", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := &fakeRequest{route: tt.route, headers: map[string]string{}}
			if tt.header != "" {
				req.headers["x-priority"] = tt.header
			}
			c, _ := s.Class(req, nil)
			assert.Equal(t, tt.want, c)
		})
	}
}

func TestAKeyShareCountsByClientIPUnlessTold(t *testing.T) {
	s := mustParse(t, `{"rules":[{"name":"r","limits":[{"rate":"5/s"}]}],"shed":{"capacity":100,"key_share":100}}`).Shedders[0]
	require.True(t, s.KeyShared())
	assert.Equal(t, 100, s.Policy.KeyShare())
	assert.Equal(t, int64(10), s.Policy.KeySlots(100))
	assert.Equal(t, 400, s.KeyShareSlots())
	req := &fakeRequest{headers: map[string]string{"x-tenant": "acme"}, source: "192.0.2.7:1234"}
	assert.Equal(t, "192.0.2.7", string(s.ShareKey(req, nil)))
	s = mustParse(t, `{"rules":[{"name":"r","limits":[{"rate":"5/s"}]}],"shed":{"capacity":100,"key_share":100,"share_key":[{"header":"x-tenant"}]}}`).Shedders[0]
	assert.Equal(t, "acme", string(s.ShareKey(req, nil)))
	s = mustParse(t, `{"rules":[{"name":"r","limits":[{"rate":"5/s"}]}],"shed":{"capacity":100}}`).Shedders[0]
	assert.False(t, s.KeyShared(), "no key share by default")
}

func TestAProbeTimeoutAndMinimumSamplesAreConfigured(t *testing.T) {
	c := mustParse(t, `{"rules":[{"name":"r","limits":[{"rate":"5/s"}]}],"shed":{"adaptive":{"probe_timeout":"500ms","probe_min_samples":4}}}`)
	g := c.Shedders[0].Adaptive
	assert.Equal(t, 500*time.Millisecond, g.ProbeTimeout)
	assert.Equal(t, int64(4), g.ProbeMinSamples)
	c = mustParse(t, `{"rules":[{"name":"r","limits":[{"rate":"5/s"}]}],"shed":{"adaptive":{}}}`)
	assert.Equal(t, 2*time.Second, c.Shedders[0].Adaptive.ProbeTimeout, "the default")
}

func TestShedConfigErrorsNameTheirField(t *testing.T) {
	tests := []struct{ name, shed, path string }{
		{"a shedder needs a capacity", `{}`, "shed.capacity"},
		{"capacity and adaptive exclude each other", `{"capacity":5,"adaptive":{}}`, "shed.capacity"},
		{"a zero capacity is refused", `{"capacity":0}`, "shed.capacity"},
		{"an unknown route class is refused", `{"capacity":5,"route_classes":{"a":"gold"}}`, "shed.route_classes.a"},
		{"a bad class header is refused", `{"capacity":5,"class_header":"x y"}`, "shed.class_header"},
		{"a reserve of 1000 is refused", `{"capacity":5,"classes":[{"name":"a","reserve":1000},{"name":"b"}],"default_class":"b"}`, "shed.classes[0].reserve"},
		{"an unknown default class is refused", `{"capacity":5,"default_class":"gold"}`, "shed"},
		{"an adaptive probe limit above max_limit is refused", `{"adaptive":{"max_limit":10,"initial_limit":5,"probe_limit":11}}`, "shed.adaptive.probe_limit"},
		{"an adaptive interval below 10ms is refused", `{"adaptive":{"interval":"1ms"}}`, "shed.adaptive.interval"},
		{"a key share of 0 is refused", `{"capacity":5,"key_share":0}`, "shed.key_share"},
		{"a key share above 1000 is refused", `{"capacity":5,"key_share":1001}`, "shed.key_share"},
		{"a share key without a key share is refused", `{"capacity":5,"share_key":["client_ip"]}`, "shed.share_key"},
		{"a bad share key part is refused", `{"capacity":5,"key_share":100,"share_key":["nope"]}`, "shed.share_key[0]"},
		{"a probe timeout below 100ms is refused", `{"adaptive":{"probe_timeout":"10ms"}}`, "shed.adaptive.probe_timeout"},
		{"a probe_min_samples of 0 is refused", `{"adaptive":{"probe_min_samples":0}}`, "shed.adaptive.probe_min_samples"},
		{"a retry_after below 1s is refused", `{"capacity":5,"retry_after":"10ms"}`, "shed.retry_after"},
		{"an unknown shed field is refused", `{"capacity":5,"capactiy":5}`, "shed.capactiy"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseConfig([]byte(`{"rules":[{"name":"r","limits":[{"rate":"5/s"}]}],"shed":` + tt.shed + `}`))
			require.Error(t, err)
			paths := []string{}
			for _, fe := range fieldErrors(t, err) {
				paths = append(paths, fe.Path)
			}
			assert.Contains(t, paths, tt.path, "%v", err)
		})
	}
}

func TestAConcurrencyDenialRendersQuAndNoRetryAfter(t *testing.T) {
	c := mustParse(t, `{"rules":[{"name":"gpu","limits":[{"concurrency":20,"name":"slots"}]}]}`)
	spec := c.Rules()[0].Concurrency()
	var lr LocalResponse
	out := []Outcome{{Limit: spec, Decision: ConcurrencyDecision(20, 20, false)}}
	c.Response.Deny(&lr, nil, out, false, 0)
	h := map[string]string{}
	for _, f := range lr.Headers {
		h[f.Name] = string(f.Value)
	}
	assert.Equal(t, `"slots";q=20;qu="concurrent-requests"`, h[HeaderRateLimitPolicy])
	assert.Equal(t, `"slots";r=0`, h[HeaderRateLimit])
	assert.NotContains(t, h, HeaderRetryAfter, "no wait can be promised for a permit")
	assert.Equal(t, uint32(429), lr.Status)
}

func TestTheSummaryOfAShedderSaysItsKeyShare(t *testing.T) {
	lines, err := Explain([]byte(`{"rules":[{"name":"r","limits":[{"rate":"5/s"}]}],"shed":{"capacity":100,"key_share":100}}`))
	require.NoError(t, err)
	assert.Contains(t, strings.Join(lines, "\n"), "capacity 100 in flight; classes critical > default > sheddable; one key holds at most 100/1000 of the capacity (key_share)")
}
