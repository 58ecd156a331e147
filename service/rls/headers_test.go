package rls

import (
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/internal/sfv"
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
