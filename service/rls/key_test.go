package rls

import (
	"strings"
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

// Review r21 F2: an entry value of ~250 KB was stored verbatim in the Redis key, so ~773 calls
// filled a 200 MB Redis. A long key is now stored hashed, at most MaxKey bytes, and two long
// values that differ only past the readable prefix still count apart.
func TestAClientSendingAQuarterMegabyteValueStoresAKeyOfAtMostMaxKeyBytes(t *testing.T) {
	key := func(v string) string {
		r := &pb.RateLimitRequest{Domain: "detail"}
		r.Descriptors = append(r.Descriptors, desc("user", v))
		return string(appendKey(nil, "detail", r, 0, rlsconfig.Hour, nil))
	}
	long := strings.Repeat("v", 250_000)
	a, b := key(long+"a"), key(long+"b")
	assert.LessOrEqual(t, len(a), MaxKey)
	assert.True(t, strings.HasPrefix(a, "rls#"), "hashed")
	assert.True(t, strings.Contains(a, ":rls:detail|user=vvv"), "the readable prefix")
	assert.False(t, a == b, "values that differ past the prefix")
	assert.True(t, a == key(long+"a"), "the same value, the same counter")
	short := strings.Repeat("v", MaxKey-len("rls:detail|user=@hour"))
	assert.Equal(t, "rls:detail|user="+short+"@hour", key(short), "a key of MaxKey bytes is kept as is")
	assert.True(t, strings.HasPrefix(key(short+"v"), "rls#"), "one byte more is hashed")
}
