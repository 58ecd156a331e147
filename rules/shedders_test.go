package rules

import (
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const oneRule = `{"rules":[{"name":"r","limits":[{"rate":"5/s"}]}],`

func TestSheddersAreMatchedInOrderAndNamed(t *testing.T) {
	c := mustParse(t, oneRule+`"shedders":[
		{"name":"api","match":{"path":{"prefix":"/api/"}},"capacity":10},
		{"name":"rest","capacity":50}]}`)
	require.Len(t, c.Shedders, 2)
	api, rest := c.Shedders[0], c.Shedders[1]
	assert.Equal(t, "meshlimit.shed.api.", api.MetricPrefix)
	assert.Equal(t, "meshlimit.shed.rest.", rest.MetricPrefix)
	assert.True(t, api.Matches(&fakeRequest{path: "/api/x"}))
	assert.False(t, api.Matches(&fakeRequest{path: "/static/x"}))
	assert.True(t, rest.Matches(&fakeRequest{path: "/static/x"}), "a shedder without a match governs every request")
}

func TestTheShedObjectIsOneUnnamedShedderWithTheOldMetricNames(t *testing.T) {
	c := mustParse(t, oneRule+`"shed":{"capacity":5}}`)
	require.Len(t, c.Shedders, 1)
	assert.Equal(t, "", c.Shedders[0].Name)
	assert.Equal(t, "meshlimit.shed.", c.Shedders[0].MetricPrefix)
	assert.True(t, c.Shedders[0].Matches(&fakeRequest{path: "/"}))
}

func TestAClassComesFromAnIdentityBeforeTheClassHeader(t *testing.T) {
	s := mustParse(t, oneRule+`"shed":{"capacity":5,"class_header":"x-priority",
		"route_classes":{"checkout":"critical"},
		"class_from":{"key":{"property":["jwt","tier"]},"classes":{"gold":"critical","free":"sheddable"}}}}`).Shedders[0]
	tests := []struct {
		name, route, tier, header string
		want                      int
	}{
		{"a gold identity is critical", "other", "gold", "", 0},
		{"a free identity is sheddable", "other", "free", "", 2},
		{"a free identity cannot promote itself with the class header", "other", "free", "critical", 2},
		{"a listed route wins over the identity", "checkout", "free", "", 0},
		{"an unmapped identity falls to the class header", "other", "silver", "sheddable", 2},
		{"an unmapped identity without a header is the default", "other", "silver", "", 1},
		{"no identity is the default", "other", "", "", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := &fakeRequest{route: tt.route, headers: map[string]string{}, props: map[string]string{}}
			if tt.tier != "" {
				req.props["jwt.tier"] = tt.tier
			}
			if tt.header != "" {
				req.headers["x-priority"] = tt.header
			}
			c, _ := s.Class(req, nil)
			assert.Equal(t, tt.want, c)
		})
	}
}

func TestAClassFromAHeaderMapsItsValue(t *testing.T) {
	s := mustParse(t, oneRule+`"shed":{"capacity":5,
		"class_from":{"key":{"header":"x-tenant-plan"},"classes":{"enterprise":"critical"}}}}`).Shedders[0]
	c, _ := s.Class(&fakeRequest{headers: map[string]string{"x-tenant-plan": "enterprise"}}, nil)
	assert.Equal(t, 0, c)
	c, _ = s.Class(&fakeRequest{headers: map[string]string{"x-tenant-plan": "Enterprise"}}, nil)
	assert.Equal(t, 1, c, "values compare exactly")
}

func TestAShedderEnforcesADeterministicShareOfItsKeys(t *testing.T) {
	s := mustParse(t, oneRule+`"shed":{"capacity":5,"enforce_percent":30,"key":[{"header":"x-user"}]}}`).Shedders[0]
	enforced := 0
	for i := range 1000 {
		req := &fakeRequest{headers: map[string]string{"x-user": "u" + strconv.Itoa(i)}}
		a, _ := s.Enforced(req, nil)
		b, _ := s.Enforced(req, nil)
		require.Equal(t, a, b, "the same key is decided the same way")
		if a {
			enforced++
		}
	}
	assert.InDelta(t, 300, enforced, 60)
	all := mustParse(t, oneRule+`"shed":{"capacity":5}}`).Shedders[0]
	ok, _ := all.Enforced(&fakeRequest{}, nil)
	assert.True(t, ok, "enforce_percent defaults to 100")
	none := mustParse(t, oneRule+`"shed":{"capacity":5,"enforce_percent":0}}`).Shedders[0]
	ok, _ = none.Enforced(&fakeRequest{}, nil)
	assert.False(t, ok)
}

// Issue 20 review, E3: with enforce_percent on a key the client writes (x-user), the client could
// compute which of its values are in shadow (FNV-1a of the shedder's name and the value) and use
// only those, which are never shed.
func TestAClientCannotComputeWhichOfItsValuesAreInShadowUnderAnEnforceSecret(t *testing.T) {
	const base = `"shed":{"capacity":5,"enforce_percent":50,"key":[{"header":"x-user"}]`
	open := mustParse(t, oneRule+base+`}}`).Shedders[0]
	keyed := mustParse(t, oneRule+base+`,"enforce_secret":"a secret of the proxies, 32 bytes"}}`).Shedders[0]
	again := mustParse(t, oneRule+base+`,"enforce_secret":"a secret of the proxies, 32 bytes"}}`).Shedders[0]
	other := mustParse(t, oneRule+base+`,"enforce_secret":"another secret of the proxies!!!"}}`).Shedders[0]
	computed, enforced, differ := 0, 0, 0
	for i := range 1000 {
		req := &fakeRequest{headers: map[string]string{"x-user": "u" + strconv.Itoa(i)}}
		if e, _ := open.Enforced(req, nil); e {
			continue // the client computes these offline and never uses them
		}
		computed++
		e, _ := keyed.Enforced(req, nil)
		if e {
			enforced++
		}
		e2, _ := again.Enforced(req, nil)
		require.Equal(t, e, e2, "every proxy with the secret decides a value the same way")
		if e3, _ := other.Enforced(req, nil); e3 != e {
			differ++
		}
	}
	assert.InDelta(t, computed/2, enforced, float64(computed)/10, "half the values the client computed as shadow are enforced")
	assert.InDelta(t, computed/2, differ, float64(computed)/10, "another secret picks another half")
}

func TestShedderConfigErrorsNameTheirField(t *testing.T) {
	tests := []struct{ name, doc, path string }{
		{"shed and shedders exclude each other", `"shed":{"capacity":5},"shedders":[{"name":"a","capacity":5}]`, "shedders"},
		{"a shedder needs a name", `"shedders":[{"capacity":5}]`, "shedders[0].name"},
		{"a shedder name is a metric segment", `"shedders":[{"name":"a.b","capacity":5}]`, "shedders[0].name"},
		{"two shedders cannot share a name", `"shedders":[{"name":"a","capacity":5},{"name":"a","capacity":5}]`, "shedders[1].name"},
		{"a shedder's field errors name the shedder", `"shedders":[{"name":"a","capacity":0}]`, "shedders[0].capacity"},
		{"a shedder's match errors name the shedder", `"shedders":[{"name":"a","capacity":5,"match":{"methods":["G T"]}}]`, "shedders[0].match.methods[0]"},
		{"the shed object takes no name", `"shed":{"name":"a","capacity":5}`, "shed.name"},
		{"the shed object takes no match", `"shed":{"match":{},"capacity":5}`, "shed.match"},
		{"class_from needs a key", `"shed":{"capacity":5,"class_from":{"classes":{"a":"critical"}}}`, "shed.class_from.key"},
		{"class_from needs classes", `"shed":{"capacity":5,"class_from":{"key":{"header":"x-plan"}}}`, "shed.class_from.classes"},
		{"class_from refuses an unknown class", `"shed":{"capacity":5,"class_from":{"key":{"header":"x-plan"},"classes":{"a":"gold"}}}`, `shed.class_from.classes["a"]`},
		{"class_from refuses a bad key part", `"shed":{"capacity":5,"class_from":{"key":{"header":"x y"},"classes":{"a":"critical"}}}`, "shed.class_from.key.header"},
		{"enforce_percent above 100 is refused", `"shed":{"capacity":5,"enforce_percent":101,"key":[{"header":"x-user"}]}`, "shed.enforce_percent"},
		{"a partial enforce_percent needs a key", `"shed":{"capacity":5,"enforce_percent":50}`, "shed.key"},
		{"an enforce_secret under 16 bytes is refused", `"shed":{"capacity":5,"enforce_percent":50,"key":[{"header":"x-user"}],"enforce_secret":"short"}`, "shed.enforce_secret"},
		{"an enforce_secret over 256 bytes is refused", `"shed":{"capacity":5,"enforce_percent":50,"key":[{"header":"x-user"}],"enforce_secret":"` + strings.Repeat("s", 257) + `"}`, "shed.enforce_secret"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseConfig([]byte(oneRule + tt.doc + `}`))
			require.Error(t, err)
			paths := []string{}
			for _, fe := range fieldErrors(t, err) {
				paths = append(paths, fe.Path)
			}
			assert.Contains(t, paths, tt.path, "%v", err)
		})
	}
}

func TestAShedderClassAndEnforcementDoNotAllocate(t *testing.T) {
	s := mustParse(t, oneRule+`"shedders":[{"name":"a-rather-long-shedder-name-for-the-hash","capacity":5,
		"class_from":{"key":{"header":"x-tier"},"classes":{"gold":"critical"}},
		"enforce_percent":40,"key":[{"header":"x-user"}]}]}`).Shedders[0]
	req := &fakeRequest{headers: map[string]string{"x-user": "u1", "x-tier": "gold"}, path: "/"}
	buf := make([]byte, 0, 64)
	allocs := testing.AllocsPerRun(100, func() {
		_ = s.Matches(req)
		_, buf = s.Class(req, buf)
		_, buf = s.Enforced(req, buf)
	})
	assert.Zero(t, allocs)
	r := Rule{Name: "shed/" + s.Name, EnforcePercent: 40}
	got, _ := s.Enforced(req, buf)
	assert.Equal(t, r.EnforcedFor([]byte("u1")), got, "the same hash as a rule's enforce_percent")
}
