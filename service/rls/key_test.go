package rls

import (
	"testing"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/assert"

	"github.com/meshlimit/meshlimit/service/rlsconfig"
)

func TestCounterKeysNeverCollide(t *testing.T) {
	key := func(domain string, shared []string, kv ...string) string {
		r := &pb.RateLimitRequest{Domain: domain}
		r.Descriptors = append(r.Descriptors, desc(kv...))
		return string(appendKey(nil, domain, r, 0, rlsconfig.Minute, shared))
	}
	for _, tc := range []struct{ name, a, b string }{
		{"a separator in a value does not fake a second entry",
			key("d", nil, "a", "b|c=d"), key("d", nil, "a", "b", "c", "d")},
		{"a separator in a key does not move the value",
			key("d", nil, "a=b", "c"), key("d", nil, "a", "b=c")},
		{"a unit marker in a value does not fake the unit",
			key("d", nil, "a", "b@minute"), key("d", nil, "a", "b")},
		{"a value equal to a shared pattern does not share its counter",
			key("d", []string{"files/*"}, "files", "files/x"), key("d", nil, "files", "files/*")},
		{"a domain with a separator stays one domain",
			key("d|a=b", nil, "c", "d"), key("d", nil, "a", "b", "c", "d")},
	} {
		t.Run(tc.name, func(t *testing.T) { assert.NotEqual(t, tc.a, tc.b) })
	}
	assert.Equal(t, `rls:d|a=b\|c\=d@minute`, key("d", nil, "a", "b|c=d"))
	assert.Equal(t, "rls:d|files~files/*@minute", key("d", []string{"files/*"}, "files", "files/x"))
}
