package rules

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// keyOf returns the key and status of r for req.
func keyOf(r *Rule, req Request) (string, KeyStatus) {
	k, st := r.AppendKey(nil, req)
	return string(k), st
}

func TestAClientRotatingThroughItsSlash64GetsOneBucket(t *testing.T) {
	r := ruleOf(t, `{"name": "r", "key": ["client_ip"], "limits": [{"rate": "5/m"}]}`)
	rng := rand.New(rand.NewPCG(1, 2))
	keys := map[string]bool{}
	for range 10_000 {
		var a [16]byte
		copy(a[:8], netip.MustParseAddr("2001:db8:7:9::").AsSlice())
		for i := 8; i < 16; i++ {
			a[i] = byte(rng.Uint32())
		}
		src := "[" + netip.AddrFrom16(a).String() + "]:443"
		k, st := keyOf(r, &fakeRequest{source: src})
		require.Equal(t, KeyFound, st)
		keys[k] = true
	}
	assert.Equal(t, map[string]bool{"2001:db8:7:9::/64": true}, keys)
}

func TestIPv4ClientsKeepOneBucketEachAndMappedFormsGroupWithThem(t *testing.T) {
	r := ruleOf(t, `{"name": "r", "key": ["client_ip"], "limits": [{"rate": "5/m"}]}`)
	k1, _ := keyOf(r, &fakeRequest{source: "192.0.2.1:80"})
	k2, _ := keyOf(r, &fakeRequest{source: "192.0.2.2:80"})
	mapped, _ := keyOf(r, &fakeRequest{source: "[::ffff:192.0.2.1]:80"})
	assert.Equal(t, "192.0.2.1", k1)
	assert.Equal(t, "192.0.2.2", k2)
	assert.Equal(t, k1, mapped)
}

func TestAnOverrideOfAnIPv6ClientIsWrittenAsItsMaskedPrefix(t *testing.T) {
	_, err := ParseConfig([]byte(`{"rules": [{"name": "r", "key": ["client_ip"], "limits": [{"rate": "5/m"}],
		"overrides": [{"value": "2001:db8::1", "unlimited": true}]}]}`))
	require.Error(t, err)
	assert.Contains(t, err.Error(), `"2001:db8::1" never matches: the key holds "2001:db8::/64"`)
	r := ruleOf(t, `{"name": "r", "key": ["client_ip"], "limits": [{"rate": "5/m"}],
		"overrides": [{"value": "2001:db8::/64", "unlimited": true}]}`)
	k, _ := keyOf(r, &fakeRequest{source: "[2001:db8::42]:1"})
	_, unlimited := r.Limits([]byte(k))
	assert.True(t, unlimited)
}

func TestARepeatedKeyHeaderCannotMintBuckets(t *testing.T) {
	r := ruleOf(t, `{"name": "r", "key": [{"header": "x-user"}], "limits": [{"rate": "5/m"}]}`)
	tests := []struct {
		name   string
		values []string
		want   string
		st     KeyStatus
	}{
		{"one value is its key", []string{"alice"}, "alice", KeyFound},
		{"the same value repeated counts once", []string{"alice", "alice"}, "alice", KeyFound},
		{"a random value in front of alice is a conflict", []string{"r1", "alice"}, "", KeyConflict},
		{"a random value after alice is a conflict", []string{"alice", "r2"}, "", KeyConflict},
		{"an empty value in front of alice is a conflict, not a missing key", []string{"", "alice"}, "", KeyConflict},
		{"an empty value alone is missing", []string{""}, "", KeySkip},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			k, st := keyOf(r, &fakeRequest{multi: map[string][]string{"x-user": tc.values}})
			assert.Equal(t, tc.st, st)
			assert.Equal(t, tc.want, k)
		})
	}
}

func TestAConflictWinsOverAMissingPartSoSkipCannotHideIt(t *testing.T) {
	r := ruleOf(t, `{"name": "r", "key": [{"header": "x-tenant"}, {"header": "x-user"}], "limits": [{"rate": "5/m"}]}`)
	_, st := keyOf(r, &fakeRequest{multi: map[string][]string{"x-user": {"r1", "alice"}}})
	assert.Equal(t, KeyConflict, st)
}

func TestARepeatedQueryParameterCannotMintBuckets(t *testing.T) {
	r := ruleOf(t, `{"name": "r", "key": [{"query": "user"}], "limits": [{"rate": "5/m"}]}`)
	for path, want := range map[string]KeyStatus{
		"/?user=alice":                 KeyFound,
		"/?user=alice&user=al%69ce":    KeyFound,
		"/?user=r1&user=alice":         KeyConflict,
		"/?user=&user=alice":           KeyConflict,
		"/?user=alice&x=1&user=alice2": KeyConflict,
	} {
		_, st := keyOf(r, &fakeRequest{path: path})
		assert.Equal(t, want, st, path)
	}
}

func TestAHeaderConditionHoldsWhenAnyValueSatisfiesIt(t *testing.T) {
	tests := []struct {
		name   string
		cond   string
		values []string
		want   bool
	}{
		{"exact holds when one of the values is it", `"exact": "premium"`, []string{"free", "premium"}, true},
		{"exact fails when no value is it", `"exact": "premium"`, []string{"free", "gold"}, false},
		{"inverted exact holds when a value differs, so premium cannot shield free", `"exact": "premium", "invert": true`, []string{"premium", "free"}, true},
		{"inverted exact fails only when every value is it", `"exact": "premium", "invert": true`, []string{"premium", "premium"}, false},
		{"a prefix on a later value holds", `"prefix": "bot-"`, []string{"curl", "bot-x"}, true},
		{"a regex on a later value holds", `"regex": "v[0-9]+"`, []string{"x", "v2"}, true},
		{"inverted on a missing header holds", `"exact": "a", "invert": true`, nil, true},
		{"a value on a missing header fails", `"exact": "a"`, nil, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := ruleOf(t, `{"name": "r", "limits": [{"rate": "1/s"}], "match": {"headers": [{"name": "x-tier", `+tc.cond+`}]}}`)
			req := &fakeRequest{multi: map[string][]string{}}
			if tc.values != nil {
				req.multi["x-tier"] = tc.values
			}
			assert.Equal(t, tc.want, r.Matches(req))
		})
	}
}

func TestARepeatedCostHeaderIsChargedItsHighestValue(t *testing.T) {
	r := ruleOf(t, `{"name": "r", "limits": [{"rate": "100/s"}], "cost": {"header": "x-cost", "max": 10}}`)
	c, err := r.Cost(&fakeRequest{multi: map[string][]string{"x-cost": {"1", "7", "3"}}})
	assert.NoError(t, err)
	assert.Equal(t, int64(7), c)
	c, _ = r.Cost(&fakeRequest{multi: map[string][]string{"x-cost": {"1", "900"}}})
	assert.Equal(t, int64(10), c, "capped at max")
	c, err = r.Cost(&fakeRequest{multi: map[string][]string{"x-cost": {"bogus", "1"}}})
	assert.Error(t, err)
	assert.Equal(t, int64(1), c, "an invalid value costs the default")
}

func TestAForwardedForSplitOverRepeatedHeadersIsCountedFromTheRight(t *testing.T) {
	r := ruleOf(t, `{"name": "r", "limits": [{"rate": "1/s"}], "key": [{"client_ip": {"trusted_hops": 2}}]}`)
	req := &fakeRequest{multi: map[string][]string{"x-forwarded-for": {"6.6.6.6, 1.1.1.1", "2.2.2.2"}}}
	k, st := keyOf(r, req)
	require.Equal(t, KeyFound, st)
	assert.Equal(t, "1.1.1.1", k, "the client cannot pick its hop by splitting the header")
	r3 := ruleOf(t, `{"name": "r", "limits": [{"rate": "1/s"}], "key": [{"client_ip": {"trusted_hops": 4}}]}`)
	_, st = keyOf(r3, req)
	assert.Equal(t, KeySkip, st, "fewer entries than hops, across all values")
}

func TestPathVariantsDoNotEscapePrefixExactOrRegex(t *testing.T) {
	variants := []string{"/api", "//api", "/%61pi", "/%61%70%69", "/./api", "/x/../api", "/../api?q=1", "///./x/..//api#frag"}
	for _, m := range []string{`{"exact": "/api"}`, `{"prefix": "/api"}`, `{"regex": "/api/?"}`} {
		r := ruleOf(t, `{"name": "r", "limits": [{"rate": "1/s"}], "match": {"path": `+m+`}}`)
		for _, p := range variants {
			assert.True(t, r.Matches(&fakeRequest{path: p}), "%s must match %q", m, p)
		}
		assert.False(t, r.Matches(&fakeRequest{path: "/apix/.."}), "%s: /apix/.. is /", m)
	}
}

func TestIgnoreCaseMatchesThePathInAnyCase(t *testing.T) {
	r := ruleOf(t, `{"name": "r", "limits": [{"rate": "1/s"}], "match": {"path": {"prefix": "/api/", "ignore_case": true}}}`)
	assert.True(t, r.Matches(&fakeRequest{path: "/API/users"}))
	assert.True(t, r.Matches(&fakeRequest{path: "//Api/./users"}))
	assert.False(t, r.Matches(&fakeRequest{path: "/apj/users"}))
	strict := ruleOf(t, `{"name": "r", "limits": [{"rate": "1/s"}], "match": {"path": {"prefix": "/api/"}}}`)
	assert.False(t, strict.Matches(&fakeRequest{path: "/API/users"}), "case matters without ignore_case")
}

func TestATrailingDotSpellingMatchesTheRuleOfItsPlainPath(t *testing.T) {
	r := ruleOf(t, `{"name": "r", "limits": [{"rate": "1/s"}], "match": {"path": {"exact": "/login", "ignore_case": true}}}`)
	for _, p := range []string{"/login.", "/login%2e", "/LOGIN..", "/%4Cogin.;x", "/x/../login./"} {
		assert.True(t, r.Matches(&fakeRequest{path: p}), "%s is /login", p)
	}
	assert.False(t, r.Matches(&fakeRequest{path: "/login.json"}), "exact keeps its meaning: a format suffix is another path")
	_, err := ParseConfig([]byte(`{"rules": [{"name": "r", "limits": [{"rate": "1/s"}], "match": {"path": {"exact": "/login."}}}]}`))
	assert.ErrorContains(t, err, `"/login." never matches: paths are matched in normalized form; write "/login"`)
}

func TestHostVariantsDoNotEscapeHosts(t *testing.T) {
	r := ruleOf(t, `{"name": "r", "limits": [{"rate": "1/s"}], "match": {"hosts": ["api.example.com", "*.corp.example"]}}`)
	for _, h := range []string{"api.example.com", "API.Example.COM", "api.example.com.", "api.example.com:8443", "api.example.com.:443", "x.corp.example.", "X.CORP.EXAMPLE:1"} {
		assert.True(t, r.Matches(&fakeRequest{host: h}), h)
	}
	for _, h := range []string{"api.example.com..", "www.example.com", "corp.example."} {
		assert.False(t, r.Matches(&fakeRequest{host: h}), h)
	}
}

func TestPathAndHostKeysAreNormalized(t *testing.T) {
	r := ruleOf(t, `{"name": "r", "limits": [{"rate": "1/s"}], "key": ["host", "path"]}`)
	want, _ := keyOf(r, &fakeRequest{host: "api.example.com", path: "/api/users"})
	assert.Equal(t, "api.example.com|/api/users", want)
	for _, v := range [][2]string{{"API.example.com.:8443", "//api/users"}, {"api.example.com", "/%61pi/./users?x=1"}, {"api.example.com.", "/x/../api/users"}} {
		k, _ := keyOf(r, &fakeRequest{host: v[0], path: v[1]})
		assert.Equal(t, want, k, v)
	}
	upper, _ := keyOf(r, &fakeRequest{host: "api.example.com", path: "/API/users"})
	assert.NotEqual(t, want, upper, "the path key keeps case")
}

func TestTheCatastrophicRegexIsRefusedAtStartNamingItsField(t *testing.T) {
	for field, m := range map[string]string{
		"rules[0].match.path.regex":       `{"path": {"regex": ".*(?:.?){1000}"}}`,
		"rules[0].match.headers[0].regex": `{"headers": [{"name": "x-a", "regex": ".*(?:.?){1000}"}]}`,
	} {
		_, err := ParseConfig([]byte(`{"rules": [{"name": "r", "limits": [{"rate": "1/s"}], "match": ` + m + `}]}`))
		var fe *FieldError
		require.ErrorAs(t, err, &fe, field)
		assert.Equal(t, field, fe.Path)
		assert.Contains(t, fe.Msg, "at most 200 are allowed")
	}
	_, err := ParseConfig([]byte(`{"rules": [{"name": "r", "limits": [{"rate": "1/s"}], "match": {"path": {"regex": "/api/v[0-9]+/(users|orders|items)/[0-9a-f-]{36}"}}}]}`))
	assert.NoError(t, err, "a realistic regex fits")
}

func TestARegexSeesAtMostMaxRegexInputBytesAndAnOversizedValueNeverEscapes(t *testing.T) {
	long := strings.Repeat("a", maxRegexInput+1)
	for _, invert := range []bool{false, true} {
		r := ruleOf(t, fmt.Sprintf(`{"name": "r", "limits": [{"rate": "1/s"}], "match": {"headers": [{"name": "x-a", "regex": "b+", "invert": %t}]}}`, invert))
		assert.True(t, r.Matches(&fakeRequest{headers: map[string]string{"x-a": long}}), "invert %t: the rule applies", invert)
	}
	r := ruleOf(t, `{"name": "r", "limits": [{"rate": "1/s"}], "match": {"path": {"regex": "/b+"}}}`)
	assert.True(t, r.Matches(&fakeRequest{path: "/" + long}))
	assert.False(t, r.Matches(&fakeRequest{path: "/" + long[:maxRegexInput-1]}), "within the bound the regex decides")
}

func TestAppendNormalizedPath(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", "/"},
		{"/", "/"},
		{"*", "/*"},
		{"api", "/api"},
		{"/api", "/api"},
		{"/api/", "/api/"},
		{"//api//v1//", "/api/v1/"},
		{"/%61pi", "/api"},
		{"/%7Euser/%2d", "/~user/-"},
		{"/a%2fb", "/a%2Fb"},
		{"/a%2Fb/..", "/"},
		{"/%2e/api", "/api"},
		{"/%2E%2E/api", "/api"},
		{"/./api", "/api"},
		{"/x/../api", "/api"},
		{"/a/b/..", "/a/"},
		{"/a/b/.", "/a/b/"},
		{"/../../api", "/api"},
		{"/a/.../b", "/a/.../b"},
		{"/api?x=/../y", "/api"},
		{"/api#/../frag", "/api"},
		{"/%zz/%4", "/%zz/%4"},
		{"/%%36%31", "/%%361"},
		{"/%6%31", "/%6%31"},
		{"/caf%C3%A9", "/caf%C3%A9"},
		{"/api;x", "/api"},
		{"/api;jsessionid=1/users", "/api/users"},
		{"/..;/admin", "/admin"},
		{"/a/.;x/b", "/a/b"},
		{"/;x/api", "/api"},
		{"/api%3Bx", "/api%3Bx"},
		{"/api;x?y=1", "/api"},
		{"/login.", "/login"},
		{"/login%2e", "/login"},
		{"/login..%2E./", "/login/"},
		{"/a.../b", "/a/b"},
		{"/v1.2/x", "/v1.2/x"},
		{"/login.;x", "/login"},
		{"/%2", "/%2"},
		{"/%2%2e", "/%2"},
	}
	for _, tc := range tests {
		assert.Equal(t, tc.want, string(AppendNormalizedPath(nil, tc.in)), tc.in)
	}
	buf := make([]byte, 0, 64)
	assert.Zero(t, testing.AllocsPerRun(100, func() { buf = AppendNormalizedPath(buf[:0], "//a/./b/../%63?x") }))
}

// FuzzNormalizedPath checks the normalizer's contract: the result starts with '/', is never
// longer than the input (plus the '/' it may add), is already normalized, and has no empty,
// "." or ".." segment.
func FuzzNormalizedPath(f *testing.F) {
	for _, s := range []string{"", "/", "//api", "/%61pi", "/./api", "/x/../api", "/%%36%31", "/%6%31", "/a/b/..", "*", "/%2e%2E/%2F?#", "/..;/a", "/a;b/c;d", "/%;61", "/%6;%31", "/login.", "/login%2e", "/a.../b", "/%2%2e", "/.../x./", strings.Repeat("/..", 300)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		out := string(AppendNormalizedPath(nil, p))
		if !strings.HasPrefix(out, "/") {
			t.Fatalf("%q normalizes to %q, which does not start with '/'", p, out)
		}
		if bound := len(p) + 1; len(out) > bound || strings.HasPrefix(p, "/") && len(out) > len(p) && len(p) > 0 {
			t.Fatalf("%q normalizes to the longer %q", p, out)
		}
		if again := string(AppendNormalizedPath(nil, out)); again != out {
			t.Fatalf("not idempotent: %q -> %q -> %q", p, out, again)
		}
		for _, seg := range strings.Split(out[1:], "/")[:max(0, strings.Count(out[1:], "/"))] {
			if seg == "" || seg == "." || seg == ".." {
				t.Fatalf("%q normalizes to %q with segment %q", p, out, seg)
			}
		}
	})
}

func TestAnOverrideOfAPathOrHostIsWrittenInTheFormTheKeyHolds(t *testing.T) {
	for value, want := range map[string]string{
		"/api//users|api.example.com":     `part 1 (path) "/api//users" never matches: the key holds "/api/users"`,
		"/api/users|API.example.com:8443": `part 2 (host) "API.example.com:8443" never matches: the key holds "api.example.com"`,
	} {
		_, err := ParseConfig([]byte(`{"rules": [{"name": "r", "key": ["path", "host"], "limits": [{"rate": "5/m"}],
			"overrides": [{"value": "` + value + `", "unlimited": true}]}]}`))
		assert.ErrorContains(t, err, want, value)
	}
	r := ruleOf(t, `{"name": "r", "key": ["path", "host"], "limits": [{"rate": "5/m"}],
		"overrides": [{"value": "/api/users|api.example.com", "unlimited": true}]}`)
	k, _ := keyOf(r, &fakeRequest{path: "//api/./users", host: "API.example.com."})
	_, unlimited := r.Limits([]byte(k))
	assert.True(t, unlimited)
}

// A prefix may end inside a segment: "/v1." is the start of "/v1.0/x", which normalization leaves
// as it is, so it is accepted and matches it (the recheck of issue 20 found it refused), while a
// prefix that normalization would change in every path it begins is still refused.
func TestAPrefixEndingInsideASegmentWithADotIsAcceptedAndMatches(t *testing.T) {
	r := ruleOf(t, `{"name": "r", "limits": [{"rate": "1/s"}], "match": {"path": {"prefix": "/v1."}}}`)
	assert.True(t, r.Matches(&fakeRequest{path: "/v1.0/x"}))
	assert.False(t, r.Matches(&fakeRequest{path: "/v1x"}))
	for _, bad := range []string{"/api//", "/login;", "/a/./b"} {
		_, err := ParseConfig([]byte(`{"rules": [{"name": "r", "limits": [{"rate": "1/s"}], "match": {"path": {"prefix": "` + bad + `"}}}]}`))
		assert.ErrorContains(t, err, "never matches", bad)
	}
}
