package e2e

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/internal/envoyhost"
)

// sheddersConfig has a shedder of capacity 2 for /api/ and one of capacity 5 for the rest,
// each with a single class.
const sheddersConfig = `{"rules":[{"name":"all","limits":[{"rate":"1000000/s"}]}],
	"shedders":[
		{"name":"api","match":{"path":{"prefix":"/api/"}},"capacity":2,"classes":[{"name":"only"}],"default_class":"only"},
		{"name":"web","capacity":5,"classes":[{"name":"only"}],"default_class":"only"}]}`

func TestEachShedderBoundsItsOwnRequestsAndCountsThemUnderItsName(t *testing.T) {
	p := load(t, module(t, "meshlimit"), sheddersConfig, 2)
	admitted := func(path string, n int) int {
		a := 0
		for i := range n {
			if _, ok := openStream(t, p.VM(i%2), get("api.example", path, "192.0.2.9")); ok {
				a++
			}
		}
		return a
	}
	assert.Equal(t, 2, admitted("/api/v1", 6), "the api shedder holds its capacity of 2")
	assert.Equal(t, 5, admitted("/index.html", 8), "the web shedder's capacity is its own")
	flushCounters(p)
	m := p.Process().Metrics()
	assert.Equal(t, int64(2), m["meshlimit.shed.api.only.admitted"].Value)
	assert.Equal(t, int64(4), m["meshlimit.shed.api.only.shed"].Value)
	assert.Equal(t, int64(5), m["meshlimit.shed.web.only.admitted"].Value)
	assert.Equal(t, int64(3), m["meshlimit.shed.web.only.shed"].Value)
	assert.Equal(t, int64(2), m["meshlimit.shed.api.capacity"].Value)
	assert.Equal(t, int64(5), m["meshlimit.shed.web.capacity"].Value)
}

func TestARequestNoShedderMatchesIsNeverShed(t *testing.T) {
	cfg := `{"rules":[{"name":"all","limits":[{"rate":"1000000/s"}]}],
		"shedders":[{"name":"api","match":{"path":{"prefix":"/api/"}},"capacity":1,"classes":[{"name":"only"}],"default_class":"only"}]}`
	p := load(t, module(t, "meshlimit"), cfg, 1)
	for range 5 {
		_, ok := openStream(t, p.VM(0), get("api.example", "/static/app.js", "192.0.2.9"))
		assert.True(t, ok)
	}
	_, ok := openStream(t, p.VM(0), get("api.example", "/api/x", "192.0.2.9"))
	assert.True(t, ok)
	_, ok = openStream(t, p.VM(0), get("api.example", "/api/x", "192.0.2.9"))
	assert.False(t, ok)
}

// tieredConfig takes the class from a JWT claim the jwt_authn filter verified, and also
// honours x-priority (the case the docs warn about).
const tieredConfig = `{"rules":[{"name":"all","limits":[{"rate":"1000000/s"}]}],
	"shed":{"capacity":10,"class_header":"x-priority",
		"class_from":{"key":{"property":["metadata","filter_metadata","envoy.filters.http.jwt_authn","payload","tier"]},
			"classes":{"enterprise":"critical","free":"sheddable"}}}}`

func withTier(tier string, extra ...[2]string) *envoyhost.Request {
	r := get("api.example", "/", "192.0.2.9", extra...)
	r.Info.Properties = map[string][]byte{
		envoyhost.Path("metadata", "filter_metadata", "envoy.filters.http.jwt_authn", "payload", "tier"): []byte(tier),
	}
	return r
}

func TestAFreeTierClientCannotPromoteItselfToCriticalWithAHeader(t *testing.T) {
	p := load(t, module(t, "meshlimit"), tieredConfig, 1)
	admitted := 0
	for range 12 {
		if _, ok := openStream(t, p.VM(0), withTier("free", [2]string{"x-priority", "critical"})); ok {
			admitted++
		}
	}
	assert.Equal(t, 7, admitted, "the identity's class (sheddable) wins over the header")
	assert.Equal(t, int64(5), counter(p, "meshlimit.shed.sheddable.shed"))
	assert.Zero(t, counter(p, "meshlimit.shed.critical.admitted"))
	_, ok := openStream(t, p.VM(0), withTier("enterprise"))
	assert.True(t, ok, "an enterprise identity is critical and keeps its reserve")
	assert.Equal(t, int64(1), counter(p, "meshlimit.shed.critical.admitted"))
}

func TestAShedderWithEnforcePercentShedsOnlyTheEnforcedKeys(t *testing.T) {
	cfg := `{"rules":[{"name":"all","limits":[{"rate":"1000000/s"}]}],
		"shed":{"capacity":1,"classes":[{"name":"only"}],"default_class":"only",
			"enforce_percent":50,"key":[{"header":"x-user"}]}}`
	p := load(t, module(t, "meshlimit"), cfg, 1)
	user := func(i int) *envoyhost.Request {
		return get("api.example", "/", "192.0.2.9", [2]string{"x-user", "u" + strconv.Itoa(i)})
	}
	_, ok := openStream(t, p.VM(0), user(-1)) // fills the capacity
	require.True(t, ok)
	shed := map[int]bool{}
	for i := range 200 {
		_, ok := openStream(t, p.VM(0), user(i))
		shed[i] = !ok
	}
	n := 0
	for i := range 200 {
		_, ok := openStream(t, p.VM(0), user(i))
		assert.Equal(t, shed[i], !ok, "user %d is decided the same way every time", i)
		if shed[i] {
			n++
		}
	}
	assert.InDelta(t, 100, n, 30, "about half the keys are enforced")
	assert.Equal(t, int64(2*(200-n)), counter(p, "meshlimit.shed.only.shadow_shed"))
	assert.Equal(t, int64(2*n), counter(p, "meshlimit.shed.only.shed"))
}
