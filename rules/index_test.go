package rules

import (
	"encoding/json"
	"fmt"
	"math/rand"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// selected returns the rules of c that req matches, as the filter finds them: Select, then
// Rule.Matches on each selected rule in order.
func selected(c *Config, req Request, s *Selection) []int {
	c.Select(req, s)
	var out []int
	for i := s.Next(0); i >= 0; i = s.Next(i + 1) {
		if c.Rules()[i].Matches(req) {
			out = append(out, i)
		}
	}
	return out
}

// scanned returns the rules of c that req matches, by a scan of every rule.
func scanned(c *Config, req Request) []int {
	var out []int
	for i, r := range c.Rules() {
		if r.Matches(req) {
			out = append(out, i)
		}
	}
	return out
}

// Pools the random configurations and requests draw from, with the cases that fold: upper case,
// ports and trailing dots, "K" (U+212A, the Kelvin sign) and "ſ" (U+017F) which strings.EqualFold
// folds to k and s, nested prefixes and trailing slashes.
var (
	hostPool    = []string{"a.example", "b.example", "API.example", "x.a.example", "*.example", "*.a.example", "*", "[::1]", "\u212a.example", "k.example", "\u017f.example"}
	reqHostPool = []string{"a.example", "A.EXAMPLE:8080", "b.example.", "api.example", "x.a.example", "y.x.a.example", ".example", "example", "[::1]:443", "::1", "k.example", "K.example", "\u212a.example", "s.example", "", "\u017f.example"}
	pathPool    = []string{"/", "/api", "/api/", "/api/v1", "/api/v1/", "/API/v1", "/apix", "/login", "/login/", "/\u212a", "/k", "/other1/"}
	reqPathPool = []string{"/", "/api", "/api/", "/api/v1", "/api/v1/users", "/API/V1/", "/apix/y", "/login", "/LOGIN/", "/logins", "/k", "/K", "/\u212a", "/other1", "/other1/z", "/ap", "/%61pi/v1?q=1"}
	methodPool  = []string{"GET", "post", "DELETE", "KILL", "SET"}
	reqMethPool = []string{"GET", "get", "POST", "Delete", "KILL", "\u212aILL", "\u017fET", "PUT", ""}
	routePool   = []string{"r1", "r2", "R1"}
)

func pick(rng *rand.Rand, pool []string) string { return pool[rng.Intn(len(pool))] }

func some(rng *rand.Rand, pool []string) []string {
	var out []string
	for n := rng.Intn(3) + 1; n > 0; n-- {
		out = append(out, pick(rng, pool))
	}
	return out
}

// randomMatch draws a match: each condition present or not, hosts, methods and route names as
// lists, the path exact, prefix or regex, with or without ignore_case, and now and then a header.
func randomMatch(rng *rand.Rand) map[string]any {
	m := map[string]any{}
	if rng.Intn(3) == 0 {
		m["route_names"] = some(rng, routePool)
	}
	if rng.Intn(2) == 0 {
		m["hosts"] = some(rng, hostPool)
	}
	if rng.Intn(3) == 0 {
		m["methods"] = some(rng, methodPool)
	}
	if rng.Intn(3) > 0 {
		p := map[string]any{}
		switch v := pick(rng, pathPool); rng.Intn(5) {
		case 0:
			p["regex"] = "/api.*"
		case 1, 2:
			p["prefix"] = v
		default:
			p["exact"] = v
		}
		if _, re := p["regex"]; !re && rng.Intn(3) == 0 {
			p["ignore_case"] = true
		}
		m["path"] = p
	}
	if rng.Intn(6) == 0 {
		m["headers"] = []map[string]any{{"name": "x-tier", "exact": "gold"}}
	}
	return m
}

func randomConfig(t *testing.T, rng *rand.Rand) *Config {
	var rs []map[string]any
	for i := rng.Intn(12) + 1; i > 0; i-- {
		rs = append(rs, map[string]any{"name": fmt.Sprintf("r%d", i), "limits": []map[string]any{{"rate": "1/s"}}, "match": randomMatch(rng)})
	}
	data, err := json.Marshal(map[string]any{"rules": rs})
	require.NoError(t, err)
	c, err := ParseConfig(data)
	if err != nil { // a path value that normalization changes ("/K" with the Kelvin sign is kept)
		return nil
	}
	return c
}

func randomRequest(rng *rand.Rand) *fakeRequest {
	r := &fakeRequest{host: pick(rng, reqHostPool), path: pick(rng, reqPathPool), method: pick(rng, reqMethPool), route: pick(rng, routePool)}
	if rng.Intn(2) == 0 {
		r.headers = map[string]string{"x-tier": "gold"}
	}
	return r
}

func TestTheIndexedSelectionMatchesTheRulesAScanOfEveryRuleMatchesInOrder(t *testing.T) {
	rng := rand.New(rand.NewSource(22))
	var s Selection
	configs, narrowed := 0, 0
	for configs < 1500 {
		c := randomConfig(t, rng)
		if c == nil {
			continue
		}
		configs++
		for j := 0; j < 40; j++ {
			req := randomRequest(rng)
			want := scanned(c, req)
			require.Equal(t, want, selected(c, req, &s), "config %d request %+v", configs, *req)
			if n := count(&s); n < len(c.Rules()) {
				narrowed++
			}
		}
	}
	assert.Greater(t, narrowed, 1500*40/4, "the index narrows the candidates of most requests")
}

func count(s *Selection) int {
	n := 0
	for i := s.Next(0); i >= 0; i = s.Next(i + 1) {
		n++
	}
	return n
}

// manyRules returns a configuration of n rules, each but the last missing the request
// GET bench.example/api/items by the given match, the last matching it by its path prefix.
func manyRules(n int, miss func(i int) string) string {
	var rs []string
	for i := 1; i < n; i++ {
		rs = append(rs, fmt.Sprintf(`{"name":"r%d","limits":[{"rate":"1/s"}],"match":%s}`, i, miss(i)))
	}
	rs = append(rs, `{"name":"last","limits":[{"rate":"1/s"}],"match":{"path":{"prefix":"/api/"}}}`)
	return `{"rules":[` + strings.Join(rs, ",") + `]}`
}

func TestARequestSelectsOnlyTheRulesOfItsHostPathRouteAndMethod(t *testing.T) {
	req := &fakeRequest{method: "GET", host: "Bench.Example:80", path: "/api/items?page=2", route: "main"}
	for name, miss := range map[string]func(int) string{
		"hosts":    func(i int) string { return fmt.Sprintf(`{"hosts":["other%d.example"],"methods":["GET"]}`, i) },
		"suffixes": func(i int) string { return fmt.Sprintf(`{"hosts":["*.other%d.example"]}`, i) },
		"prefixes": func(i int) string { return fmt.Sprintf(`{"path":{"prefix":"/other%d/"}}`, i) },
		"exact":    func(i int) string { return fmt.Sprintf(`{"path":{"exact":"/api/items%d","ignore_case":true}}`, i) },
		"routes":   func(i int) string { return fmt.Sprintf(`{"route_names":["route%d"]}`, i) },
		"methods":  func(i int) string { return fmt.Sprintf(`{"methods":["M%d"]}`, i) },
	} {
		c := mustParse(t, manyRules(250, miss))
		var s Selection
		c.Select(req, &s)
		assert.Equal(t, 249, s.Next(0), name)
		assert.Equal(t, -1, s.Next(250), name)
	}
}

func TestRulesTheIndexCannotNarrowStaySelectedInTheirOrder(t *testing.T) {
	c := mustParse(t, `{"rules":[
		{"name":"re","limits":[{"rate":"1/s"}],"match":{"path":{"regex":"/x.*"}}},
		{"name":"host","limits":[{"rate":"1/s"}],"match":{"hosts":["other.example"]}},
		{"name":"hdr","limits":[{"rate":"1/s"}],"match":{"headers":[{"name":"x-a","present":true}]}},
		{"name":"every","limits":[{"rate":"1/s"}]},
		{"name":"fold","limits":[{"rate":"1/s"}],"match":{"hosts":["\u017f.example"]}}]}`)
	var s Selection
	c.Select(&fakeRequest{host: "bench.example", path: "/api"}, &s)
	assert.Equal(t, []int{0, 2, 3, 4}, indices(&s))
}

func indices(s *Selection) []int {
	var out []int
	for i := s.Next(0); i >= 0; i = s.Next(i + 1) {
		out = append(out, i)
	}
	return out
}

// readCounter counts the request values read.
type readCounter struct {
	fakeRequest
	routes, methods int
}

func (r *readCounter) RouteName() string { r.routes++; return r.route }
func (r *readCounter) Method() string    { r.methods++; return r.method }

func TestSelectReadsNoValueThatNoSelectedRuleNarrowsBy(t *testing.T) {
	c := mustParse(t, `{"rules":[{"name":"a","limits":[{"rate":"1/s"}],"match":{"hosts":["a.example"],"route_names":["r"],"methods":["GET"]}}]}`)
	req := &readCounter{fakeRequest: fakeRequest{host: "b.example", method: "GET", route: "r"}}
	var s Selection
	c.Select(req, &s)
	assert.Equal(t, -1, s.Next(0))
	assert.Zero(t, req.routes)
	assert.Zero(t, req.methods)
}

func TestSelectDoesNotAllocate(t *testing.T) {
	c := mustParse(t, manyRules(50, func(i int) string {
		return fmt.Sprintf(`{"hosts":["*.o%d.example","o%d.example"],"methods":["get"],"path":{"prefix":"/x%d/","ignore_case":true},"route_names":["r%d"]}`, i, i, i, i)
	}))
	req := &fakeRequest{method: "get", host: "A.O7.Example:80", path: "/X7/y", route: "r7"}
	var s Selection
	c.Select(req, &s)
	assert.Zero(t, testing.AllocsPerRun(100, func() { c.Select(req, &s) }))
	assert.Equal(t, []int{6}, indices(&s))
}
