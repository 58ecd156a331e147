package rls

import (
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/internal/redistest"
	"github.com/meshlimit/meshlimit/internal/sfv"
	"github.com/meshlimit/meshlimit/service"
	"github.com/meshlimit/meshlimit/service/rlsconfig"
)

func headerMap(hs []*core.HeaderValue) map[string]string {
	m := make(map[string]string, len(hs))
	for _, h := range hs {
		m[h.GetKey()] = h.GetValue()
	}
	return m
}

func TestDraft03HeadersDescribeOneDescriptor(t *testing.T) {
	for _, tc := range []struct {
		name string
		reqs []*pb.RateLimitRequest
		want map[string]string
	}{
		{"the descriptor with the fewest remaining is described",
			[]*pb.RateLimitRequest{req("mongo_cps", desc("database", "users"), desc("database", "default"), desc("database", "users"))},
			map[string]string{"RateLimit-Limit": "500", "RateLimit-Remaining": "498", "RateLimit-Reset": "1"}},
		{"of two with as few remaining, the first is described",
			[]*pb.RateLimitRequest{req("units", desc("u", "m"), desc("u", "s"))},
			map[string]string{"RateLimit-Limit": "1", "RateLimit-Remaining": "0", "RateLimit-Reset": "60"}},
		{"the last descriptor over the limit is described",
			[]*pb.RateLimitRequest{req("edge_proxy_per_ip", desc("remote_address", "50.0.0.5"), withHits(desc("remote_address", "1.1.1.1"), 11), desc("remote_address", "2.2.2.2"))},
			map[string]string{"RateLimit-Limit": "10", "RateLimit-Remaining": "0", "RateLimit-Reset": "1"}},
		{"a quota-mode descriptor over its limit competes only on what remains",
			[]*pb.RateLimitRequest{req("quota", withHits(desc("user", "u"), 50), withHits(desc("plan", "small"), 2)), req("quota", desc("user", "u"), desc("plan", "small"))},
			map[string]string{"RateLimit-Limit": "50", "RateLimit-Remaining": "0", "RateLimit-Reset": "2760"}},
		{"no descriptor with a limit, no headers",
			[]*pb.RateLimitRequest{req("internal", desc("ldap", "x"), desc("nothing", "y"))},
			map[string]string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, memoryStore(t), HeadersDraft03)
			var resp *pb.RateLimitResponse
			for _, r := range tc.reqs {
				resp = f.call(r)
			}
			assert.Equal(t, tc.want, headerMap(resp.GetResponseHeadersToAdd()))
		})
	}
}

func TestIETFHeadersListEveryDescriptorWithALimitAndParse(t *testing.T) {
	f := newFixture(t, memoryStore(t), HeadersIETF)
	resp := f.call(req("example7", desc("key_1", "value_1", "user", "bkthomps"), desc("internal", "none"), desc("key_2", "value_2", "user", "bkthomps")))
	h := headerMap(resp.GetResponseHeadersToAdd())
	assert.Equal(t, `"example7.key_2_value_2.user_bkthomps";q=10;w=1`, h["RateLimit-Policy"])
	assert.Equal(t, `"example7.key_2_value_2.user_bkthomps";r=9;t=1`, h["RateLimit"])
	resp = f.call(req("example7", desc("key_1", "value_1", "user", "bkthomps"), desc("key_2", "value_2", "user", "x")))
	h = headerMap(resp.GetResponseHeadersToAdd())
	assert.Equal(t, `"specific_limit";q=5;w=1`, h["RateLimit-Policy"])
	for _, k := range []string{"RateLimit-Policy", "RateLimit"} {
		_, err := sfv.ParseList(h[k])
		require.NoError(t, err, k)
	}
}

func TestParseHeaderMode(t *testing.T) {
	for s, want := range map[string]HeaderMode{"": HeadersOff, "off": HeadersOff, "false": HeadersOff, "draft03": HeadersDraft03, "true": HeadersDraft03, "IETF": HeadersIETF} {
		m, err := ParseHeaderMode(s)
		require.NoError(t, err, s)
		assert.Equal(t, want, m, s)
	}
	_, err := ParseHeaderMode("draft99")
	assert.Error(t, err)
}

// effectiveWindows is a configuration with one descriptor per algorithm, 10 per minute (100 per hour
// for the token bucket).
const effectiveWindows = `domain: windows
descriptors:
  - {key: algo, value: fixed, rate_limit: {unit: minute, requests_per_unit: 10}}
  - {key: algo, value: token, rate_limit: {unit: hour, requests_per_unit: 100, algorithm: token_bucket}}
  - {key: algo, value: log, rate_limit: {unit: minute, requests_per_unit: 10, algorithm: sliding_log}}
  - {key: algo, value: counter, rate_limit: {unit: minute, requests_per_unit: 10, algorithm: sliding_window}}
`

// ietfT sends hits for one descriptor at the given seconds after minuteStart and returns the t of
// the last answer's RateLimit field, with the status's DurationUntilReset.
func ietfT(t *testing.T, store service.Store, value string, steps ...[2]int64) (tParam, untilReset int64) {
	t.Helper()
	f := newFixture(t, store, HeadersIETF)
	rules, err := rlsconfig.Load([]rlsconfig.File{{Name: "windows.yaml", Data: []byte(effectiveWindows)}})
	require.NoError(t, err)
	f.mu.Lock()
	f.rules = rules
	f.mu.Unlock()
	var resp *pb.RateLimitResponse
	for _, s := range steps {
		f.setNow(minuteStart.Add(time.Duration(s[0]) * time.Second))
		resp = f.call(req("windows", withHits(desc("algo", value), uint64(s[1]))))
	}
	ps, err := sfv.ParsePolicies(headerMap(resp.GetResponseHeadersToAdd())["RateLimit"])
	require.NoError(t, err)
	require.Len(t, ps, 1)
	return ps[0].Params["t"], resp.GetStatuses()[0].GetDurationUntilReset().GetSeconds()
}

// TestIETFHeadersTIsTheEffectiveWindowOfEachAlgorithm: the RLS front's t is the effective window of
// draft-ietf-httpapi-ratelimit-headers-11, as the filter's is, while DurationUntilReset keeps the
// peer's meaning (the fixed window's end; for the extension's algorithms, until the quota is full).
func TestIETFHeadersTIsTheEffectiveWindowOfEachAlgorithm(t *testing.T) {
	for _, tc := range []struct {
		name     string
		value    string
		steps    [][2]int64 // seconds after the start of a minute, hits
		t, reset int64
	}{
		{"the fixed window ends at its end", "fixed", [][2]int64{{20, 3}}, 40, 40},
		{"a token bucket of 100/h two units down gets its next unit in 36 s", "token", [][2]int64{{0, 1}, {0, 1}}, 36, 72},
		{"a sliding log with 3 used at 0 s and 2 at 25 s can use more in 35 s", "log", [][2]int64{{0, 3}, {25, 2}}, 35, 60},
		{"a sliding window counter with 5 of 10 used 25 s in frees a unit in 41 s", "counter", [][2]int64{{0, 3}, {25, 2}}, 41, 95},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, reset := ietfT(t, memoryStore(t), tc.value, tc.steps...)
			assert.Equal(t, tc.t, got, "t")
			assert.Equal(t, tc.reset, reset, "DurationUntilReset")
		})
		t.Run(tc.name+", on Redis", func(t *testing.T) {
			got, _ := ietfT(t, redisStore(t, redistest.Start(t).Addr()), tc.value, tc.steps...)
			assert.Equal(t, tc.t, got, "t: the Lua scripts compute the effective window as the memory store does")
		})
	}
}
