package rlsconfig

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func loadGood(t *testing.T) *Config {
	t.Helper()
	files, err := ReadDir("testdata/good")
	require.NoError(t, err)
	c, err := Load(files)
	require.NoError(t, err)
	return c
}

func entries(kv ...string) []Entry {
	es := make([]Entry, 0, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		es = append(es, Entry{kv[i], kv[i+1]})
	}
	return es
}

func match(c *Config, domain string, es []Entry) (Rule, bool) {
	return c.Match(domain, len(es), func(i int) Entry { return es[i] })
}

func TestTheDocumentedExamplesLoad(t *testing.T) {
	c := loadGood(t)
	assert.Equal(t, []string{"edge_proxy_per_ip", "example10", "example11", "example4", "example6", "example7", "example8",
		"example9", "internal", "messaging", "mongo_cps", "quota", "units"}, c.Domains())
	assert.Len(t, c.Files(), 13)
}

func TestMatch(t *testing.T) {
	c := loadGood(t)
	for _, tc := range []struct {
		name, domain string
		entries      []Entry
		wantPath     string // "" means no rule
		wantRPU      uint32
	}{
		{"an exact key and value matches its rule", "mongo_cps", entries("database", "users"), "mongo_cps.database_users", 500},
		{"a value without a rule matches nothing when there is no key-only rule", "mongo_cps", entries("database", "other"), "", 0},
		{"an unknown domain matches nothing", "nope", entries("database", "users"), "", 0},
		{"the key-only rule takes any value", "edge_proxy_per_ip", entries("remote_address", "50.0.0.1"), "edge_proxy_per_ip.remote_address", 10},
		{"the exact value wins over the key-only rule", "edge_proxy_per_ip", entries("remote_address", "50.0.0.5"), "edge_proxy_per_ip.remote_address_50.0.0.5", 0},
		{"an empty value matches only the key-only rule", "edge_proxy_per_ip", entries("remote_address", ""), "edge_proxy_per_ip.remote_address", 10},
		{"a nested key-only rule matches under its parent", "messaging", entries("message_type", "marketing", "to_number", "2061111111"), "messaging.message_type_marketing.to_number", 5},
		{"a placeholder without a limit gives no limit", "messaging", entries("message_type", "marketing"), "messaging.message_type_marketing", 0},
		{"a request deeper than the rules matches nothing", "example4", entries("key", "value", "subkey", "subvalue"), "", 0},
		{"a limit above the request's last entry is ignored", "example4", entries("other", "value"), "example4.other_value", 0},
		{"a limit at the request's last level applies", "example4", entries("other", "value", "subkey", "x"), "example4.other_value.subkey", 300},
		{"a trailing wildcard matches a longer value", "example9", entries("key1", "valueXYZ"), "example9.key1_value*", 20},
		{"a trailing wildcard matches its bare prefix", "example9", entries("key1", "value"), "example9.key1_value*", 20},
		{"a middle wildcard matches prefix and suffix", "example9", entries("path", "/api/123/action"), "example9.path_/api/*/action", 21},
		{"the first wildcard in file order wins", "example9", entries("path", "/api/123/other"), "example9.path_/api/*", 22},
		{"a trailing slash pattern matches the bare prefix", "example9", entries("path", "/api/"), "example9.path_/api/*", 22},
		{"several wildcards match in order", "example9", entries("route", "/api/v1/resource/123/action"), "example9.route_/api/*/resource/*/action", 23},
		{"several wildcards out of order do not match", "example9", entries("route", "/api/v1/action/123/resource"), "", 0},
		{"no wildcard falls back to the key-only rule", "example9", entries("path", "/web"), "example9.path", 24},
		{"a wildcard of another key does not match", "example9", entries("other", "value1"), "", 0},
		{"unit names are case-insensitive", "internal", entries("azure", "x"), "internal.azure", 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, ok := match(c, tc.domain, tc.entries)
			if tc.wantPath == "" {
				assert.False(t, ok && r.Limit != nil, "want no limit, got %+v", r)
				return
			}
			require.True(t, ok)
			assert.Equal(t, tc.wantPath, r.Path)
			if tc.wantRPU == 0 && r.Limit == nil {
				return
			}
			require.NotNil(t, r.Limit)
			assert.Equal(t, tc.wantRPU, r.Limit.RequestsPerUnit)
		})
	}
}

func TestTheRuleCarriesShadowModeUnlimitedReplacesAndTheAlgorithm(t *testing.T) {
	c := loadGood(t)
	r, _ := match(c, "example6", entries("service", "auth", "user", "user-a"))
	assert.True(t, r.ShadowMode)
	r, _ = match(c, "internal", entries("ldap", "x"))
	require.NotNil(t, r.Limit)
	assert.True(t, r.Limit.Unlimited)
	assert.Zero(t, r.Limit.Unit)
	r, _ = match(c, "example7", entries("key_2", "value_2", "user", "bkthomps"))
	assert.Equal(t, []string{"specific_limit"}, r.Limit.Replaces)
	r, _ = match(c, "units", entries("algo", "sliding"))
	assert.Equal(t, "sliding_window", r.Limit.Algorithm.String())
	for v, u := range map[string]Unit{"s": Second, "m": Minute, "h": Hour, "d": Day, "w": Week, "mo": Month, "y": Year} {
		r, _ = match(c, "units", entries("u", v))
		assert.Equal(t, u, r.Limit.Unit, v)
	}
}

func TestUnitsLastWhatEnvoyproxyRatelimitSays(t *testing.T) {
	assert.Equal(t, int64(7*86400), int64(Week.Duration().Seconds()))
	assert.Equal(t, int64(30*86400), int64(Month.Duration().Seconds()))
	assert.Equal(t, int64(365*86400), int64(Year.Duration().Seconds()))
	_, ok := ParseUnit("fortnight")
	assert.False(t, ok)
}

func TestMetricNameFollowsValueToMetricAndDetailedMetric(t *testing.T) {
	c := loadGood(t)
	es := entries("route", "api", "http_method", "GET", "subject_id", "123")
	r, _ := match(c, "example10", es)
	assert.True(t, r.ValueToMetric)
	assert.Equal(t, "example10.route_api.http_method_GET.subject_id", c.MetricName("example10", len(es), func(i int) Entry { return es[i] }))
	r, _ = match(c, "example8", entries("key1", "anything"))
	assert.True(t, r.DetailedMetric)
	assert.Equal(t, "example8.key1", r.Path)
}

func TestGlobMatch(t *testing.T) {
	for _, tc := range []struct {
		name, pattern, value string
		want                 bool
	}{
		{"a star matches the empty run", "a*b", "ab", true},
		{"prefix and suffix may not overlap", "ab*ba", "aba", false},
		{"middle parts are found in order", "*x*y*", "1x2y3", true},
		{"middle parts in the wrong order fail", "*x*y*", "1y2x3", false},
		{"a lone star matches anything", "*", "", true},
		{"no star is equality", "abc", "abcd", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, globMatch(splitStar(tc.pattern), tc.value))
		})
	}
}

func TestShareThresholdNamesThePatternForTheSharedLevels(t *testing.T) {
	c := loadGood(t)
	for _, tc := range []struct {
		name    string
		entries []Entry
		want    []string
	}{
		{"a shared wildcard stands for the value", entries("files", "files/a.pdf"), []string{"files/*"}},
		{"a wildcard without share_threshold shares nothing", entries("files_no_share", "files_no_share/a.pdf"), nil},
		{"a shared parent level stands for its value under a child's limit", entries("route", "api/v1", "method", "GET"), []string{"api/*", ""}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, ok := match(c, "example11", tc.entries)
			require.True(t, ok)
			require.NotNil(t, r.Limit)
			assert.Equal(t, tc.want, r.Shared)
		})
	}
	es := entries("route", "api/v1", "method", "GET")
	assert.Equal(t, "example11.route_api/*.method", c.MetricName("example11", len(es), func(i int) Entry { return es[i] }))
}
