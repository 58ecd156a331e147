package rls

import (
	"testing"

	rlext "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/internal/sfv"
	"github.com/meshlimit/meshlimit/service/rlsconfig"
)

// names is a configuration whose limit names differ only in bytes an sf-string cannot hold.
const names = `
domain: names
descriptors:
  - key: a
    rate_limit: {unit: minute, requests_per_unit: 5, name: "nämé\"x"}
  - key: b
    rate_limit: {unit: minute, requests_per_unit: 6, name: "n??m??\"x"}
  - key: c
    rate_limit: {unit: minute, requests_per_unit: 7, name: "n%C3%A4m%C3%A9\"x"}
  - key: d
    rate_limit: {unit: minute, requests_per_unit: 3}
`

// ietfFields calls the fixture and returns its RateLimit-Policy and RateLimit, both checked to
// parse as sf-lists.
func ietfFields(t *testing.T, f *fixture, ds ...*rlext.RateLimitDescriptor) (policy, state string) {
	t.Helper()
	h := headerMap(f.call(req("names", ds...)).GetResponseHeadersToAdd())
	for _, k := range []string{"RateLimit-Policy", "RateLimit"} {
		_, err := sfv.ParseList(h[k])
		require.NoError(t, err, k)
	}
	return h["RateLimit-Policy"], h["RateLimit"]
}

func namesFixture(t *testing.T) *fixture {
	t.Helper()
	f := newFixture(t, memoryStore(t), HeadersIETF)
	rules, err := rlsconfig.Load([]rlsconfig.File{{Name: "names.yaml", Data: []byte(names)}})
	require.NoError(t, err)
	f.setRules(rules)
	return f
}

// The RateLimit fields' policy names are distinct for distinct names (non-ASCII bytes and '%'
// are percent-encoded, not all written '?'), one member per name (a descriptor sent twice
// gives one, the one with less remaining), and an override's name is its keys', not its
// position in the request.
func TestRateLimitFieldPolicyNamesAreDistinctAndStable(t *testing.T) {
	t.Run("names that differ only in non-ASCII bytes stay distinct", func(t *testing.T) {
		policy, _ := ietfFields(t, namesFixture(t), desc("a", "1"), desc("b", "1"), desc("c", "1"))
		assert.Equal(t, `"n%C3%A4m%C3%A9\"x";q=5;w=60, "n??m??\"x";q=6;w=60, "n%25C3%25A4m%25C3%25A9\"x";q=7;w=60`, policy)
	})
	t.Run("a descriptor sent twice gives one member, the one with less remaining", func(t *testing.T) {
		_, state := ietfFields(t, namesFixture(t), desc("d", "1"), desc("d", "1"))
		assert.Equal(t, `"names.d";r=1;t=60`, state, "charged twice: 3-2")
	})
	t.Run("an override is named by its keys wherever it stands", func(t *testing.T) {
		f := namesFixture(t)
		over := withOverride(desc("tenant", "t1"), 10, typev3.RateLimitUnit_HOUR)
		first, _ := ietfFields(t, f, over, desc("d", "2"))
		second, _ := ietfFields(t, f, desc("d", "3"), over)
		assert.Equal(t, `"override.names.tenant";q=10;w=3600, "names.d";q=3;w=60`, first)
		assert.Equal(t, `"names.d";q=3;w=60, "override.names.tenant";q=10;w=3600`, second)
	})
}

// FuzzEscapeName: escapeName is injective (distinct names stay distinct) and writes only
// printable ASCII, which an sf-string holds as it is (but '"' and '\', which it escapes).
func FuzzEscapeName(f *testing.F) {
	f.Add("nämé", "n??m??")
	f.Add("%C3%A4", "ä")
	f.Add("a%", "a%25")
	f.Fuzz(func(t *testing.T, a, b string) {
		if len(a) > 256 || len(b) > 256 {
			t.Skip()
		}
		ea, eb := escapeName(a), escapeName(b)
		if a != b && ea == eb {
			t.Fatalf("%q and %q both escape to %q", a, b, ea)
		}
		for i := 0; i < len(ea); i++ {
			if ea[i] < 0x20 || ea[i] > 0x7e {
				t.Fatalf("escapeName(%q) = %q holds byte %#x", a, ea, ea[i])
			}
		}
	})
}
