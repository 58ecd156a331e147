package rules

import (
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeRequest is a Request over plain fields. Header names are looked up as given (the
// filter always asks in lower case); props is keyed by the segments joined with ".".
type fakeRequest struct {
	headers map[string]string   // one value per header
	multi   map[string][]string // repeated headers, looked up before headers
	method  string
	path    string
	host    string
	route   string
	source  string
	props   map[string]string

	norm     []byte // the normalized path, computed once
	normDone bool

	sourceParses int // SourceAddr calls
}

func (r *fakeRequest) HeaderValue(name string, i int) (string, bool) {
	if vs, ok := r.multi[name]; ok {
		if i < len(vs) {
			return vs[i], true
		}
		return "", false
	}
	v, ok := r.headers[name]
	return v, ok && i == 0
}

func (r *fakeRequest) NormalizedPath() string {
	if !r.normDone {
		r.norm, r.normDone = AppendNormalizedPath(r.norm[:0], r.path), true
	}
	return unsafe.String(unsafe.SliceData(r.norm), len(r.norm))
}
func (r *fakeRequest) Method() string        { return r.method }
func (r *fakeRequest) Path() string          { return r.path }
func (r *fakeRequest) Host() string          { return r.host }
func (r *fakeRequest) RouteName() string     { return r.route }
func (r *fakeRequest) SourceAddress() string { return r.source }
func (r *fakeRequest) SourceAddr() ClientAddr {
	r.sourceParses++
	return ParseClientAddr(r.source)
}
func (r *fakeRequest) Property(path []string) (string, bool) {
	v, ok := r.props[strings.Join(path, ".")]
	return v, ok
}

// ruleOf parses a configuration with one rule, given as JSON, and returns it.
func ruleOf(t testing.TB, rule string) *Rule {
	t.Helper()
	return mustParse(t, `{"rules": [`+rule+`]}`).Rules()[0]
}

func TestMatches(t *testing.T) {
	req := &fakeRequest{
		method: "GET", path: "/v1/users/42?verbose=1", host: "API.example.com:8443", route: "default|api",
		headers: map[string]string{"x-tier": "free", "user-agent": "curl/8.0", "x-version": "2.3"},
	}
	tests := []struct {
		name  string
		match string
		want  bool
	}{
		{"an empty match applies to every request", `{}`, true},
		{"a listed route name matches", `{"route_names": ["other", "default|api"]}`, true},
		{"an unlisted route name does not", `{"route_names": ["other"]}`, false},
		{"an exact host matches case-insensitively without its port", `{"hosts": ["api.example.com"]}`, true},
		{"a pattern's trailing dot is dropped", `{"hosts": ["api.example.com."]}`, true},
		{"a suffix wildcard matches a subdomain", `{"hosts": ["*.example.com"]}`, true},
		{"a suffix wildcard does not match the bare domain", `{"hosts": ["*.api.example.com"]}`, false},
		{"a lone star matches any host", `{"hosts": ["*"]}`, true},
		{"another host does not match", `{"hosts": ["www.example.com"]}`, false},
		{"an exact path ignores the query", `{"path": {"exact": "/v1/users/42"}}`, true},
		{"an exact path must be whole", `{"path": {"exact": "/v1/users"}}`, false},
		{"a path prefix matches", `{"path": {"prefix": "/v1/"}}`, true},
		{"another prefix does not", `{"path": {"prefix": "/v2/"}}`, false},
		{"a path regex must match the whole path", `{"path": {"regex": "/v1/users/[0-9]+"}}`, true},
		{"a partial regex match is no match", `{"path": {"regex": "/v1/users"}}`, false},
		{"a regex never sees the query", `{"path": {"regex": ".*verbose.*"}}`, false},
		{"a listed method matches case-insensitively", `{"methods": ["post", "get"]}`, true},
		{"an unlisted method does not", `{"methods": ["POST"]}`, false},
		{"a present header matches", `{"headers": [{"name": "X-Tier", "present": true}]}`, true},
		{"present false requires the header to be absent", `{"headers": [{"name": "x-internal", "present": false}]}`, true},
		{"present false fails when the header is there", `{"headers": [{"name": "x-tier", "present": false}]}`, false},
		{"an exact header value matches", `{"headers": [{"name": "x-tier", "exact": "free"}]}`, true},
		{"an exact header value is case-sensitive", `{"headers": [{"name": "x-tier", "exact": "FREE"}]}`, false},
		{"a header prefix matches", `{"headers": [{"name": "x-version", "prefix": "2."}]}`, true},
		{"a header regex matches the whole value", `{"headers": [{"name": "user-agent", "regex": "curl/.*"}]}`, true},
		{"invert turns a match into a miss", `{"headers": [{"name": "user-agent", "regex": "curl/.*", "invert": true}]}`, false},
		{"a missing header never matches a value", `{"headers": [{"name": "x-missing", "exact": ""}]}`, false},
		{"invert makes a missing header match", `{"headers": [{"name": "x-missing", "exact": "a", "invert": true}]}`, true},
		{"every condition must hold", `{"methods": ["GET"], "path": {"prefix": "/v2/"}}`, false},
		{"all conditions holding is a match", `{"route_names": ["default|api"], "hosts": ["*.example.com"], "methods": ["GET"], "path": {"prefix": "/v1/"}, "headers": [{"name": "x-tier", "exact": "free"}, {"name": "x-version", "present": true}]}`, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := ruleOf(t, `{"name": "r", "limits": [{"rate": "1/s"}], "match": `+tc.match+`}`)
			assert.Equal(t, tc.want, r.Matches(req))
		})
	}
}

func TestStripPort(t *testing.T) {
	for in, want := range map[string]string{
		"example.com": "example.com", "example.com:80": "example.com", "[::1]:80": "[::1]", "[::1]": "[::1]",
		"::1": "::1", "": "", "[broken": "[broken",
	} {
		assert.Equal(t, want, stripPort(in), in)
	}
}

func TestAppendKeyComposesEveryPart(t *testing.T) {
	req := &fakeRequest{
		method: "POST", path: "/v1/items?api_key=k%7C1&x=2", host: "API.Example.com:443", route: "default|api",
		source:  "192.0.2.77:51234",
		headers: map[string]string{"x-tenant": "acme", "x-forwarded-for": "198.51.100.9, 203.0.113.5"},
		props:   map[string]string{"metadata.filter_metadata.envoy.filters.http.jwt_authn.payload.sub": "user-1"},
	}
	tests := []struct {
		name string
		key  string
		want string
	}{
		{"client_ip takes source.address without its port", `["client_ip"]`, "192.0.2.77"},
		{"client_ip masks IPv4 to the configured prefix", `[{"client_ip": {"ipv4_mask": 24}}]`, "192.0.2.0/24"},
		{"client_ip with one trusted hop takes the rightmost x-forwarded-for entry", `[{"client_ip": {"trusted_hops": 1}}]`, "203.0.113.5"},
		{"client_ip with two trusted hops takes the second from the right", `[{"client_ip": {"trusted_hops": 2}}]`, "198.51.100.9"},
		{"header takes the value as is", `[{"header": "X-Tenant"}]`, "acme"},
		{"path drops the query", `["path"]`, "/v1/items"},
		{"method is as sent", `["method"]`, "POST"},
		{"host is lower-cased without its port", `["host"]`, "api.example.com"},
		{"route_name is escaped like any value", `["route_name"]`, `default\|api`},
		{"query decodes the first value", `[{"query": "api_key"}]`, `k\|1`},
		{"constant is the configured string", `[{"constant": "v1"}]`, "v1"},
		{"property reads an Envoy attribute by segments", `[{"property": ["metadata", "filter_metadata", "envoy.filters.http.jwt_authn", "payload", "sub"]}]`, "user-1"},
		{"parts are joined with a bar in order", `["method", {"header": "x-tenant"}, {"client_ip": {"ipv4_mask": 16}}]`, "POST|acme|192.0.0.0/16"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := ruleOf(t, `{"name": "r", "limits": [{"rate": "1/s"}], "key": `+tc.key+`}`)
			buf := []byte("prefix:")
			out, st := r.AppendKey(buf, req)
			ok := st == KeyFound
			require.True(t, ok)
			assert.Equal(t, "prefix:"+tc.want, string(out), "AppendKey appends to dst")
		})
	}
}

func TestAppendKeyWithoutPartsIsTheSingleEmptyKey(t *testing.T) {
	r := ruleOf(t, `{"name": "r", "limits": [{"rate": "1/s"}]}`)
	key, st := r.AppendKey(nil, &fakeRequest{})
	ok := st == KeyFound
	assert.True(t, ok)
	assert.Empty(t, key)
}

func TestAppendKeyJoinsPartsUnambiguously(t *testing.T) {
	r := ruleOf(t, `{"name": "r", "limits": [{"rate": "1/s"}], "key": [{"header": "a"}, {"header": "b"}]}`)
	keys := map[string][2]string{}
	for _, hv := range [][2]string{
		{"x|y", "z"}, {"x", "y|z"}, {`x\`, "y"}, {"x", `\y`}, {`x\|`, "y"}, {"x", `|y`}, {`x\\`, "y"},
	} {
		key, st := r.AppendKey(nil, &fakeRequest{headers: map[string]string{"a": hv[0], "b": hv[1]}})
		ok := st == KeyFound
		require.True(t, ok)
		prev, dup := keys[string(key)]
		assert.False(t, dup, "%q and %q both give key %q", hv, prev, key)
		keys[string(key)] = hv
	}
	key, _ := r.AppendKey(nil, &fakeRequest{headers: map[string]string{"a": `x|y\`, "b": "z"}})
	assert.Equal(t, `x\|y\\|z`, string(key))
}

func TestAppendKeyTreatsMissingAndEmptyPartsPerMissingKey(t *testing.T) {
	tests := []struct {
		name    string
		missing string
		headers map[string]string
		wantOK  bool
		want    string
	}{
		{"a present key is used under skip", "skip", map[string]string{"x-api-key": "k1"}, true, "k1"},
		{"a missing header skips the rule under skip", "skip", nil, false, ""},
		{"an empty header counts as missing", "skip", map[string]string{"x-api-key": ""}, false, ""},
		{"a missing header gives the shared empty key under default", "default", nil, true, ""},
		{"a present key is unaffected by default", "default", map[string]string{"x-api-key": "k1"}, true, "k1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := ruleOf(t, `{"name": "r", "limits": [{"rate": "1/s"}], "missing_key": "`+tc.missing+`", "key": [{"header": "x-api-key"}, "method"]}`)
			req := &fakeRequest{method: "GET", headers: tc.headers}
			dst := []byte("keep")
			out, st := r.AppendKey(dst, req)
			ok := st == KeyFound
			assert.Equal(t, tc.wantOK, ok)
			want := tc.want
			if want != "" {
				want += "|GET"
			}
			assert.Equal(t, "keep"+want, string(out))
		})
	}
}

func TestAppendKeyTreatsQueryParametersStrictly(t *testing.T) {
	r := ruleOf(t, `{"name": "r", "limits": [{"rate": "1/s"}], "key": [{"query": "api key"}]}`)
	tests := []struct {
		name, path, want string
		ok               bool
	}{
		{"a plus in the name is a space", "/?api+key=a", "a", true},
		{"a percent-encoded name matches", "/?api%20key=b", "b", true},
		{"a repeated parameter with one value counts once", "/?api+key=1&api%20key=1", "1", true},
		{"a plus in the value is a space", "/?api+key=a+b", "a b", true},
		{"an invalid escape is kept literally", "/?api+key=%zz", "%zz", true},
		{"an empty value is missing", "/?api+key=&x=1", "", false},
		{"a name without a value is missing", "/?api+key", "", false},
		{"a path without a query is missing", "/items", "", false},
		{"a similar name does not match", "/?api+keys=1", "", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, st := r.AppendKey(nil, &fakeRequest{path: tc.path})
			ok := st == KeyFound
			assert.Equal(t, tc.ok, ok)
			assert.Equal(t, tc.want, string(out))
		})
	}
}

func TestAppendKeyHashesOverlongValues(t *testing.T) {
	r := ruleOf(t, `{"name": "r", "limits": [{"rate": "1/s"}], "key": [{"header": "x-api-key"}, {"query": "q"}, "host"]}`)
	long := strings.Repeat("A|", 5000)
	req := &fakeRequest{headers: map[string]string{"x-api-key": long}, path: "/?q=" + strings.Repeat("%41", 400), host: strings.Repeat("H", 300)}
	key, st := r.AppendKey(nil, req)
	ok := st == KeyFound
	require.True(t, ok)
	parts := strings.Split(string(key), "|")
	require.Len(t, parts, 3)
	for _, p := range parts {
		assert.Regexp(t, `^\\#[0-9a-f]{16}$`, p)
	}
	other, _ := r.AppendKey(nil, &fakeRequest{headers: map[string]string{"x-api-key": long + "x"}, path: req.path, host: req.host})
	assert.NotEqual(t, string(key), string(other), "distinct long values get distinct buckets")
	lower, _ := r.AppendKey(nil, &fakeRequest{headers: req.headers, path: "/?q=" + strings.Repeat("A", 400), host: strings.ToLower(req.host)})
	assert.Equal(t, string(key), string(lower), "the hash is of the decoded, lower-cased value")
}

func TestClientIP(t *testing.T) {
	tests := []struct {
		name   string
		part   string
		source string
		xff    *string
		want   string // "" = missing
	}{
		{"source IPv4 with port", `{}`, "192.0.2.1:80", nil, "192.0.2.1"},
		{"source IPv6 is its /64 by default", `{}`, "[2001:db8::1]:443", nil, "2001:db8::/64"},
		{"source IPv6 with ipv6_mask 128 keeps the address", `{"ipv6_mask": 128}`, "[2001:db8::1]:443", nil, "2001:db8::1"},
		{"source IPv4-mapped IPv6 is unmapped", `{}`, "[::ffff:192.0.2.1]:443", nil, "192.0.2.1"},
		{"source IPv6 zone is dropped", `{"ipv6_mask": 128}`, "[fe80::1%eth0]:443", nil, "fe80::1"},
		{"source without a port", `{}`, "192.0.2.1", nil, "192.0.2.1"},
		{"source garbage is missing", `{}`, "not-an-ip:80", nil, ""},
		{"empty source is missing", `{}`, "", nil, ""},
		{"source ignores x-forwarded-for at zero hops", `{}`, "192.0.2.1:80", ptr("203.0.113.9"), "192.0.2.1"},
		{"IPv4 /24", `{"ipv4_mask": 24}`, "192.0.2.200:1", nil, "192.0.2.0/24"},
		{"IPv4 /32 keeps the address", `{"ipv4_mask": 32}`, "192.0.2.200:1", nil, "192.0.2.200"},
		{"IPv4 /1", `{"ipv4_mask": 1}`, "192.0.2.200:1", nil, "128.0.0.0/1"},
		{"IPv6 /64", `{"ipv6_mask": 64}`, "[2001:db8:1:2:3:4:5:6]:1", nil, "2001:db8:1:2::/64"},
		{"IPv6 /48 leaves IPv4 unmasked", `{"ipv6_mask": 48}`, "192.0.2.200:1", nil, "192.0.2.200"},
		{"IPv4 mask leaves IPv6 at its default /64", `{"ipv4_mask": 24}`, "[2001:db8::7]:1", nil, "2001:db8::/64"},
		{"a prefix length of 1 is the smallest IPv6 mask", `{"ipv6_mask": 1}`, "[2001:db8::7]:1", nil, "::/1"},
		{"mapped IPv6 is masked as IPv4", `{"ipv4_mask": 16, "ipv6_mask": 64}`, "[::ffff:192.0.2.1]:1", nil, "192.0.0.0/16"},
		{"one hop takes the rightmost entry", `{"trusted_hops": 1}`, "", ptr("1.1.1.1, 2.2.2.2, 3.3.3.3"), "3.3.3.3"},
		{"three hops take the leftmost of three", `{"trusted_hops": 3}`, "", ptr("1.1.1.1, 2.2.2.2, 3.3.3.3"), "1.1.1.1"},
		{"more hops than entries is missing", `{"trusted_hops": 4}`, "", ptr("1.1.1.1, 2.2.2.2, 3.3.3.3"), ""},
		{"a missing header is missing", `{"trusted_hops": 1}`, "192.0.2.1:80", nil, ""},
		{"an empty header is missing", `{"trusted_hops": 1}`, "", ptr(""), ""},
		{"no spaces needed", `{"trusted_hops": 2}`, "", ptr("1.1.1.1,2.2.2.2"), "1.1.1.1"},
		{"tabs and spaces are trimmed", `{"trusted_hops": 1}`, "", ptr("1.1.1.1 ,\t 2.2.2.2 \t"), "2.2.2.2"},
		{"an empty entry at the chosen hop is missing", `{"trusted_hops": 2}`, "", ptr("1.1.1.1,,2.2.2.2"), ""},
		{"garbage at the chosen hop is missing", `{"trusted_hops": 1}`, "", ptr("1.1.1.1, unknown"), ""},
		{"garbage left of the chosen hop is ignored", `{"trusted_hops": 1}`, "", ptr("<script>, , 999.1.1.1, 2.2.2.2"), "2.2.2.2"},
		{"an entry with a port", `{"trusted_hops": 1}`, "", ptr("203.0.113.9:8080"), "203.0.113.9"},
		{"a bracketed IPv6 entry with a port", `{"trusted_hops": 1, "ipv6_mask": 128}`, "", ptr("[2001:db8::2]:8080"), "2001:db8::2"},
		{"a bare IPv6 entry", `{"trusted_hops": 1, "ipv6_mask": 64}`, "", ptr("2001:db8::2"), "2001:db8::/64"},
		{"a bracketed entry without a port", `{"trusted_hops": 1, "ipv6_mask": 128}`, "", ptr("[2001:db8::2]"), "2001:db8::2"},
		{"an IPv4 entry with a zone is missing", `{"trusted_hops": 1}`, "", ptr("192.0.2.1%eth0"), ""},
		{"a bad port is missing", `{"trusted_hops": 1}`, "", ptr("192.0.2.1:http"), ""},
		{"an unterminated bracket is missing", `{"trusted_hops": 1}`, "", ptr("[2001:db8::2"), ""},
		{"junk after brackets is missing", `{"trusted_hops": 1}`, "", ptr("[2001:db8::2]x"), ""},
		{"an overlong entry is missing", `{"trusted_hops": 1}`, "", ptr(strings.Repeat("1", 200)), ""},
		{"thousands of hops cost only the last ones", `{"trusted_hops": 2}`, "", ptr(strings.Repeat("10.0.0.1, ", 5000) + "10.9.9.9, 192.0.2.1"), "10.9.9.9"},
		{"a leading zero in IPv4 is rejected", `{"trusted_hops": 1}`, "", ptr("192.0.2.01"), ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := ruleOf(t, `{"name": "r", "limits": [{"rate": "1/s"}], "key": [{"client_ip": `+tc.part+`}]}`)
			req := &fakeRequest{source: tc.source, headers: map[string]string{}}
			if tc.xff != nil {
				req.headers["x-forwarded-for"] = *tc.xff
			}
			key, st := r.AppendKey(nil, req)
			ok := st == KeyFound
			assert.Equal(t, tc.want != "", ok)
			assert.Equal(t, tc.want, string(key))
		})
	}
}

func ptr[T any](v T) *T { return &v }

func TestLimitsAppliesOverrides(t *testing.T) {
	r := ruleOf(t, `{"name": "per-key", "key": [{"header": "x-api-key"}], "missing_key": "default",
		"limits": [{"rate": "100/m"}, {"rate": "1000/h"}],
		"overrides": [
			{"value": "gold", "limits": [{"rate": "1000/m"}]},
			{"value": "internal", "unlimited": true},
			{"value": "", "limits": [{"rate": "10/m", "name": "anonymous"}]},
			{"value": "a\\|b", "unlimited": true}
		]}`)
	get := func(headers map[string]string) ([]LimitSpec, bool) {
		key, st := r.AppendKey(nil, &fakeRequest{headers: headers})
		ok := st == KeyFound
		require.True(t, ok)
		return specs(r.Limits(key))
	}
	base, unlimited := get(map[string]string{"x-api-key": "silver"})
	assert.False(t, unlimited)
	require.Len(t, base, 2)
	assert.Equal(t, "per-key-0", base[0].Name)

	gold, unlimited := get(map[string]string{"x-api-key": "gold"})
	assert.False(t, unlimited)
	require.Len(t, gold, 1)
	assert.Equal(t, int64(1000), gold[0].Limit.Quota)
	assert.Equal(t, "per-key", gold[0].Name, "an override's single limit defaults to the rule's name")
	assert.NotEqual(t, base[0].Fingerprint, gold[0].Fingerprint)

	internal, unlimited := get(map[string]string{"x-api-key": "internal"})
	assert.True(t, unlimited)
	assert.Nil(t, internal)

	anon, _ := get(nil)
	require.Len(t, anon, 1)
	assert.Equal(t, "anonymous", anon[0].Name, `the override "" sizes the missing-key bucket`)

	_, unlimited = get(map[string]string{"x-api-key": "a|b"})
	assert.True(t, unlimited, "override values are compared in escaped form")
}

func TestOverrideValuesForMaskedClientIPs(t *testing.T) {
	r := ruleOf(t, `{"name": "r", "key": [{"client_ip": {"ipv4_mask": 24, "ipv6_mask": 64}}, "method"], "limits": [{"rate": "1/s"}],
		"overrides": [{"value": "10.1.2.0/24|GET", "unlimited": true}, {"value": "2001:db8::/64|GET", "unlimited": true}]}`)
	for _, src := range []string{"10.1.2.99:1", "[2001:db8::99]:1"} {
		key, st := r.AppendKey(nil, &fakeRequest{source: src, method: "GET"})
		ok := st == KeyFound
		require.True(t, ok)
		_, unlimited := r.Limits(key)
		assert.True(t, unlimited, src)
	}
}

func TestCost(t *testing.T) {
	r := ruleOf(t, `{"name": "r", "limits": [{"rate": "100/s"}], "cost": {"header": "X-Cost", "default": 2, "max": 50}}`)
	tests := []struct {
		name    string
		headers map[string]string
		want    int64
		wantErr bool
	}{
		{"a valid header is the cost", map[string]string{"x-cost": "7"}, 7, false},
		{"spaces around the value are allowed", map[string]string{"x-cost": " 7\t"}, 7, false},
		{"a missing header costs the default", nil, 2, false},
		{"a value above max is charged max", map[string]string{"x-cost": "5000"}, 50, false},
		{"garbage costs the default and reports an error", map[string]string{"x-cost": "lots"}, 2, true},
		{"zero is invalid", map[string]string{"x-cost": "0"}, 2, true},
		{"a negative value is invalid", map[string]string{"x-cost": "-3"}, 2, true},
		{"a fraction is invalid", map[string]string{"x-cost": "1.5"}, 2, true},
		{"repeated headers are invalid", map[string]string{"x-cost": "3,4"}, 2, true},
		{"an overflowing value is invalid", map[string]string{"x-cost": "99999999999999999999999"}, 2, true},
		{"an empty value is invalid", map[string]string{"x-cost": ""}, 2, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := r.Cost(&fakeRequest{headers: tc.headers})
			assert.Equal(t, tc.want, got)
			if tc.wantErr {
				require.Error(t, err)
				assert.True(t, strings.HasPrefix(err.Error(), `filter: rule "r": cost header "x-cost"`), err.Error())
			} else {
				assert.NoError(t, err)
			}
		})
	}
	t.Run("a constant cost ignores headers", func(t *testing.T) {
		r := ruleOf(t, `{"name": "r", "limits": [{"rate": "100/s"}], "cost": 3.0}`)
		got, err := r.Cost(&fakeRequest{headers: map[string]string{"x-cost": "9"}})
		require.NoError(t, err)
		assert.Equal(t, int64(3), got)
	})
	t.Run("a header cost defaults to 1 and max to defaultMaxCost", func(t *testing.T) {
		r := ruleOf(t, `{"name": "r", "limits": [{"rate": "100/s"}], "cost": {"header": "x-cost"}}`)
		got, _ := r.Cost(&fakeRequest{})
		assert.Equal(t, int64(1), got)
		got, _ = r.Cost(&fakeRequest{headers: map[string]string{"x-cost": "999999999"}})
		assert.Equal(t, int64(defaultMaxCost), got)
	})
}

// allocRequest is a Request whose methods never allocate, for allocation tests and
// benchmarks (fakeRequest.Property joins strings).
type allocRequest struct{ fakeRequest }

func (r *allocRequest) Property([]string) (string, bool) { return "user-1", true }

func TestMatchesAndAppendKeyDoNotAllocate(t *testing.T) {
	c := mustParse(t, benchConfig)
	req := benchRequest()
	buf := make([]byte, 0, 256)
	allocs := testing.AllocsPerRun(200, func() {
		req.normDone = false
		for _, r := range c.Rules() {
			if !r.Matches(req) {
				continue
			}
			key, st := r.AppendKey(buf[:0], req)
			ok := st == KeyFound
			if ok {
				_, _ = r.Limits(key)
				_, _ = r.Cost(req)
			}
		}
	})
	assert.Zero(t, allocs)
}

// benchConfig is a realistic configuration: per-IP with masking and two windows, per API key
// with overrides, and a per-user rule on a JWT claim.
const benchConfig = `{"rules": [
	{"name": "api-per-ip", "match": {"hosts": ["*.example.com"], "path": {"prefix": "/v1/"}, "methods": ["GET", "POST"]},
	 "key": [{"client_ip": {"trusted_hops": 1, "ipv4_mask": 24, "ipv6_mask": 64}}],
	 "limits": [{"rate": "10/s", "burst": 20}, {"rate": "1000/h"}]},
	{"name": "per-key", "match": {"headers": [{"name": "x-api-key", "present": true}]},
	 "key": [{"header": "x-api-key"}, "method"], "cost": {"header": "x-cost", "max": 10},
	 "limits": [{"rate": "100/m"}],
	 "overrides": [{"value": "gold|GET", "limits": [{"rate": "1000/m"}]}, {"value": "internal|GET", "unlimited": true}]},
	{"name": "per-user", "match": {"path": {"regex": "/v1/users/[0-9]+"}},
	 "key": [{"property": ["metadata", "filter_metadata", "envoy.filters.http.jwt_authn", "payload", "sub"]}, {"query": "tenant"}],
	 "limits": [{"rate": "5/30s", "algorithm": "sliding_window"}]}
]}`

func benchRequest() *allocRequest {
	return &allocRequest{fakeRequest{
		method: "GET", path: "/v1/users/42?tenant=acme&x=1", host: "api.example.com", route: "default|api",
		source: "10.0.0.9:5555",
		headers: map[string]string{
			"x-forwarded-for": "198.51.100.1, 203.0.113.77",
			"x-api-key":       "silver",
			"x-cost":          "3",
		},
	}}
}

func BenchmarkMatchAndKey(b *testing.B) {
	c := mustParse(b, benchConfig)
	req := benchRequest()
	buf := make([]byte, 0, 256)
	b.ReportAllocs()
	for b.Loop() {
		req.normDone = false // a new request: its path is normalized once, as the filter does
		for _, r := range c.Rules() {
			if !r.Matches(req) {
				continue
			}
			key, st := r.AppendKey(buf[:0], req)
			ok := st == KeyFound
			if ok {
				_, _ = r.Limits(key)
				_, _ = r.Cost(req)
			}
		}
	}
}

func TestHostileClientAddressesNeitherAllocateNorScanTheWholeHeader(t *testing.T) {
	r := ruleOf(t, `{"name": "r", "limits": [{"rate": "1/s"}], "key": [{"client_ip": {"trusted_hops": 3, "ipv6_mask": 64}}]}`)
	for name, xff := range map[string]string{
		"100k of hops":             strings.Repeat("203.0.113.1, ", 8000) + "2001:db8::1, 10.0.0.1, 10.0.0.2",
		"one 100k entry":           strings.Repeat("1", 100_000) + ", 10.0.0.1, 10.0.0.2",
		"100k of commas":           strings.Repeat(",", 100_000),
		"a zone that would intern": "[fe80::1%" + strings.Repeat("z", 50) + "], 10.0.0.1, 10.0.0.2",
		"binary garbage":           "\x00\xff[]%:::::, \x00, \x01",
		"a word":                   "unknown, 10.0.0.1, 10.0.0.2",
	} {
		req := &fakeRequest{headers: map[string]string{"x-forwarded-for": xff}}
		buf := make([]byte, 0, 64)
		assert.Zero(t, testing.AllocsPerRun(50, func() { _, _ = r.AppendKey(buf[:0], req) }), name)
	}
	// Address-like garbage reaches netip, whose error costs one small allocation.
	req := &fakeRequest{headers: map[string]string{"x-forwarded-for": "1.2.3.4.5, 10.0.0.1, 10.0.0.2"}}
	assert.LessOrEqual(t, testing.AllocsPerRun(50, func() { _, _ = r.AppendKey(nil, req) }), 1.0)
}
