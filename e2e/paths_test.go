package e2e

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/internal/envoyhost"
)

// The spellings of one resource that an upstream serves alike, on the compiled module with several
// worker VMs: each must meet the rule its plain spelling meets (docs/configuration.md, Paths).

// exhaust loads config on workers VMs, spends the 1/m of the client 192.0.2.1 on path and returns
// the plugin.
func exhaust(t *testing.T, config, path string, workers int) *envoyhost.Plugin {
	t.Helper()
	p := load(t, module(t, "meshlimit"), config, workers)
	require.Equal(t, 1, spread(t, p, workers, 3, func(int) *envoyhost.Request { return get("x", path, "192.0.2.1") }))
	return p
}

func TestATrailingDotOnTheLastSegmentDoesNotEscapeAnExactRule(t *testing.T) {
	const workers = 3
	p := exhaust(t, `{"rules": [{"name": "login", "match": {"path": {"exact": "/login"}},
		"limits": [{"rate": "1/m", "algorithm": "fixed_window"}]}]}`, "/login", workers)
	for i, path := range []string{"/login.", "/login%2e", "/login%2E.", "/login..", "/login./", "/x/../login.;x"} {
		res := roundTrip(t, p.VM(i%workers), get("x", path, "192.0.2.1"))
		assert.Equal(t, 429, status(res), "%s is /login to IIS and Windows: it must hit the exhausted rule", path)
	}
	assert.Equal(t, 200, status(roundTrip(t, p.VM(0), get("x", "/login.json", "192.0.2.1"))),
		"a format suffix is another path to exact: the documented recipe is a regex")
}

func TestATrailingDotOnAnInnerSegmentDoesNotEscapeAPrefixRule(t *testing.T) {
	const workers = 2
	p := exhaust(t, `{"rules": [{"name": "admin", "match": {"path": {"prefix": "/admin/"}},
		"limits": [{"rate": "1/m", "algorithm": "fixed_window"}]}]}`, "/admin/users", workers)
	for i, path := range []string{"/admin./users", "/admin%2e/users", "/admin.../users"} {
		res := roundTrip(t, p.VM(i%workers), get("x", path, "192.0.2.1"))
		assert.Equal(t, 429, status(res), "%s must hit the exhausted prefix rule", path)
	}
}

func TestAPathKeyGivesATrailingDotSpellingNoFreshBucket(t *testing.T) {
	const workers = 2
	p := exhaust(t, `{"rules": [{"name": "per-path", "match": {"path": {"prefix": "/files/"}}, "key": ["path"],
		"limits": [{"rate": "1/m", "algorithm": "fixed_window"}]}]}`, "/files/a", workers)
	for i, path := range []string{"/files/a.", "/files/a%2E", "/files./a"} {
		res := roundTrip(t, p.VM(i%workers), get("x", path, "192.0.2.1"))
		assert.Equal(t, 429, status(res), "%s must share the key of /files/a", path)
	}
	assert.Equal(t, 200, status(roundTrip(t, p.VM(0), get("x", "/files/b", "192.0.2.1"))), "another file is another key")
}

func TestLetterCaseAndEncodedLettersMeetAnIgnoreCaseRuleAndOnlyIt(t *testing.T) {
	const workers = 2
	p := exhaust(t, `{"rules": [
		{"name": "folded", "match": {"path": {"exact": "/login", "ignore_case": true}}, "limits": [{"rate": "1/m", "algorithm": "fixed_window"}]},
		{"name": "strict", "match": {"path": {"exact": "/Signup"}}, "limits": [{"rate": "1/m", "algorithm": "fixed_window"}]}]}`, "/login", workers)
	for i, path := range []string{"/LOGIN", "/%4Cogin", "/%4cOGIN.", "/Login/"} {
		res := roundTrip(t, p.VM(i%workers), get("x", path, "192.0.2.1"))
		assert.Equal(t, 429, status(res), "%s must hit the exhausted ignore_case rule", path)
	}
	require.Equal(t, 200, status(roundTrip(t, p.VM(0), get("x", "/%53ignup", "192.0.2.1"))), "an encoded letter is the letter")
	assert.Equal(t, 429, status(roundTrip(t, p.VM(1), get("x", "/Signup", "192.0.2.1"))))
	assert.Equal(t, 200, status(roundTrip(t, p.VM(1), get("x", "/SIGNUP", "192.0.2.1"))),
		"case is kept without ignore_case (the default, for case-sensitive upstreams)")
}

func TestTheDocumentedFormatSuffixRegexHoldsEveryFormatOfOnePath(t *testing.T) {
	const workers = 2
	p := exhaust(t, `{"rules": [{"name": "login", "match": {"path": {"regex": "/login(\\.[^/]+)?/?"}},
		"limits": [{"rate": "1/m", "algorithm": "fixed_window"}]}]}`, "/login", workers)
	for i, path := range []string{"/login.json", "/login.xml", "/login.json.", "/login/"} {
		res := roundTrip(t, p.VM(i%workers), get("x", path, "192.0.2.1"))
		assert.Equal(t, 429, status(res), "%s is /login to Rails: the recipe must hold it", path)
	}
	assert.Equal(t, 200, status(roundTrip(t, p.VM(0), get("x", "/loginx", "192.0.2.1"))), "another path is another matter")
}
