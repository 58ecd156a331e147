package rules

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/algorithms"
)

// fieldErrors flattens err (a *FieldError or an errors.Join of them) into "path: msg" lines.
func fieldErrors(t *testing.T, err error) []*FieldError {
	t.Helper()
	var out []*FieldError
	var walk func(error)
	walk = func(e error) {
		if j, ok := e.(interface{ Unwrap() []error }); ok {
			for _, x := range j.Unwrap() {
				walk(x)
			}
			return
		}
		var fe *FieldError
		require.True(t, errors.As(e, &fe), "error %v is not a *FieldError", e)
		out = append(out, fe)
	}
	walk(err)
	return out
}

// mustParse parses a configuration that the test expects to be valid.
// specs returns the limits of a set, as Rule.Limits returns it.
func specs(set *LimitSet, unlimited bool) ([]LimitSpec, bool) {
	if set == nil {
		return nil, unlimited
	}
	return set.Limits, unlimited
}

func mustParse(t testing.TB, doc string) *Config {
	t.Helper()
	c, err := ParseConfig([]byte(doc))
	require.NoError(t, err)
	return c
}

func TestParseConfigRejectsEachFailureModeWithItsFieldPath(t *testing.T) {
	tests := []struct {
		fixture string
		path    string
		msg     string
	}{
		{"empty", "", "empty configuration"},
		{"not-json", "", "invalid JSON at line 1"},
		{"trailing-data", "", "invalid JSON"},
		{"unknown-top-field", "rule", "unknown field (known fields: enforce, global, log_level, max_keys, response, rules, settle_memory, shed, shedders)"},
		{"unknown-nested-field", "rules[0].limits[0].rates", "unknown field"},
		{"wrong-case-field", "Rules", "unknown field"},
		{"duplicate-field", "enforce", "duplicate field"},
		{"wrong-type", "response.status", "want an integer, got a string"},
		{"fractional-number", "response.status", "want an integer, got 429.5"},
		{"no-rules", "rules", "at least one rule is required"},
		{"rule-name-missing", "rules[0].name", "required"},
		{"rule-name-invalid", "rules[0].name", `"API" is not a valid rule name`},
		{"rule-name-duplicate", "rules[1].name", `"api" is already the name of rules[0]`},
		{"no-limits", "rules[0].limits", "at least one limit is required"},
		{"too-many-limits", "rules[0].limits", "9 limits: at most 8"},
		{"rate-missing", "rules[0].limits[0].rate", "required"},
		{"rate-bad-unit", "rules[0].limits[0].rate", `unknown unit "x"`},
		{"rate-zero-quota", "rules[0].limits[0].rate", "quota must be a positive integer"},
		{"rate-window-too-long", "rules[0].limits[0].rate", "longer than 366d"},
		{"algorithm-unknown", "rules[0].limits[0].algorithm", `unknown algorithm "gcra"`},
		{"burst-on-window-algorithm", "rules[0].limits[0].burst", "only token_bucket and leaky_bucket take a burst"},
		{"policy-name-duplicate", "rules[1].limits[0].name", `policy name "shared" is already used by rules[0].limits[0]`},
		{"path-two-kinds", "rules[0].match.path", "set exactly one of exact, prefix or regex"},
		{"path-without-slash", "rules[0].match.path", `"api" must start with "/"`},
		{"path-bad-regex", "rules[0].match.path.regex", "missing closing )"},
		{"header-match-no-kind", "rules[0].match.headers[0]", "set exactly one of present, exact, prefix or regex"},
		{"header-match-bad-name", "rules[0].match.headers[0].name", "not a valid header name"},
		{"host-bad-wildcard", "rules[0].match.hosts[0]", "wildcard is only allowed"},
		{"key-part-two-fields", "rules[0].key[0]", "set exactly one of client_ip, header"},
		{"key-part-unknown-name", "rules[0].key[0]", `unknown key part "ip"`},
		{"key-part-flag-false", "rules[0].key[0].path", "must be true"},
		{"key-part-unknown-field", "rules[0].key[0].cookie", "unknown field"},
		{"client-ip-mask-out-of-range", "rules[0].key[0].client_ip.ipv4_mask", "33 out of range: want a prefix length from 1 to 32"},
		{"client-ip-mask-zero", "rules[0].key[0].client_ip.ipv6_mask", "0 out of range: want a prefix length from 1 to 128 (128 keeps the whole address)"},
		{"host-with-port", "rules[0].match.hosts[0]", `hosts are compared without their port; write "api.example.com"`},
		{"path-not-normalized", "rules[0].match.path", `never matches: paths are matched in normalized form; write "/v1/admin/"`},
		{"path-regex-ignore-case", "rules[0].match.path.ignore_case", "only exact and prefix take ignore_case"},
		{"regex-program-too-large", "rules[0].match.headers[0].regex", "compiles to 2006 instructions: at most 200 are allowed"},
		{"client-ip-hops-out-of-range", "rules[0].key[0].client_ip.trusted_hops", "65 out of range: want 0 to 64"},
		{"property-empty-segment", "rules[0].key[0].property", `empty segment in "metadata..sub"`},
		{"constant-empty", "rules[0].key[0].constant", "want 1 to 256 bytes"},
		{"missing-key-unknown", "rules[0].missing_key", `unknown value "share"`},
		{"cost-zero", "rules[0].cost", "0 out of range: want 1 to 1000000000"},
		{"cost-header-missing", "rules[0].cost.header", "required"},
		{"cost-default-above-max", "rules[0].cost.default", "10 is above max 5"},
		{"cost-unknown-field", "rules[0].cost.maximum", "unknown field"},
		{"override-without-key", "rules[0].overrides", "overrides need key parts"},
		{"override-limits-and-unlimited", "rules[0].overrides[0]", "set limits or unlimited, not both"},
		{"override-neither", "rules[0].overrides[0]", "set limits or unlimited: true"},
		{"override-wrong-part-count", "rules[0].overrides[0].value", "2 parts, but the key has 1 (header)"},
		{"override-bad-escape", "rules[0].overrides[0].value", "invalid escape at byte 1"},
		{"override-duplicate", "rules[0].overrides[1].value", `"a" is overridden twice`},
		{"override-ip-not-canonical", "rules[0].overrides[0].value", `"10.1.2.3" never matches: the key holds "10.1.2.0/24"`},
		{"override-empty-without-default", "rules[0].overrides[0].value", `missing_key "default"`},
		{"override-value-missing", "rules[0].overrides[0].value", "required"},
		{"shadow-header-invalid", "rules[0].shadow_header", "not a valid header name"},
		{"max-keys-zero", "rules[0].max_keys", "0 out of range: want 1 to 1048576"},
		{"max-keys-top-too-large", "max_keys", "2000000 out of range"},
		{"failure-mode-unknown", "rules[0].failure_mode", `unknown value "open"`},
		{"scope-global-without-global", "rules[0].scope", "needs the top-level global object"},
		{"scope-unknown", "rules[0].scope", `unknown value "cluster"`},
		{"global-missing-cluster", "global.cluster", "required"},
		{"global-timeout-too-long", "global.timeout", "2m out of range: want 1ms to 1m"},
		{"fallback-on-local-rule", "rules[0].fallback", "only rules with scope global or both have a fallback"},
		{"fallback-bad-rate", "rules[0].fallback[0].rate", `invalid rate "5/fortnight"`},
		{"lease-on-both-scope", "rules[0].lease", "only rules with scope global lease quota"},
		{"lease-missing-batch", "rules[0].lease.batch", "required"},
		{"lease-ttl-too-short", "rules[0].lease.ttl", "1ms out of range: want 10ms to 1h"},
		{"lease-batch-over-capacity", "rules[0].lease.batch", "50 exceeds the capacity 10 of limits[0]"},
		{"breaker-failures-out-of-range", "global.breaker.failures", "0 out of range: want 1 to 1000"},
		{"breaker-cooldown-too-short", "global.breaker.cooldown", "10ms out of range: want 100ms to 1h"},
		{"status-out-of-range", "response.status", "302 out of range: want 400 to 599"},
		{"body-format-unknown", "response.body_format", `unknown format "html"`},
		{"rate-limit-headers-none-combined", "response.rate_limit_headers", `"none" cannot be combined`},
		{"rate-limit-headers-unknown", "response.rate_limit_headers[0]", `unknown header set "ietf-09"`},
		{"extra-header-reserved", `response.headers["Retry-After"]`, `"retry-after" is set by the filter`},
		{"extra-header-crlf", `response.headers["x-note"]`, "contains CR, LF or NUL"},
		{"jitter-bad-unit", "response.retry_after_jitter", `unknown unit "x"`},
		{"partition-key-secret-short", "response.partition_key_secret", "5 bytes: want 16 to 256"},
		{"log-level-unknown", "log_level", `unknown level "verbose"`},
	}
	covered := map[string]bool{}
	for _, tc := range tests {
		covered[tc.fixture+".json"] = true
		t.Run("rejects "+tc.fixture, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("testdata", "config", "invalid", tc.fixture+".json"))
			require.NoError(t, err)
			c, err := ParseConfig(data)
			require.Error(t, err)
			assert.Nil(t, c)
			errs := fieldErrors(t, err)
			require.Len(t, errs, 1, "want exactly one error, got: %v", err)
			assert.Equal(t, tc.path, errs[0].Path)
			assert.Contains(t, errs[0].Msg, tc.msg)
			assert.True(t, strings.HasPrefix(err.Error(), "config: "), "error %q lacks the config: prefix", err)
		})
	}
	files, err := filepath.Glob(filepath.Join("testdata", "config", "invalid", "*.json"))
	require.NoError(t, err)
	for _, f := range files {
		assert.True(t, covered[filepath.Base(f)], "fixture %s has no case in this table", f)
	}
}

func TestParseConfigAcceptsEveryValidFixture(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "config", "valid", "*.json"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			require.NoError(t, err)
			c, err := ParseConfig(data)
			require.NoError(t, err)
			assert.NotEmpty(t, c.Summary())
		})
	}
}

func TestParseConfigReportsEveryErrorAtOnce(t *testing.T) {
	_, err := ParseConfig([]byte(`{
		"response": {"status": 200},
		"rules": [
			{"name": "a", "limits": [{"rate": "x"}]},
			{"name": "B", "limits": [{"rate": "1/s", "algorithm": "nope"}]}
		]}`))
	require.Error(t, err)
	var paths []string
	for _, fe := range fieldErrors(t, err) {
		paths = append(paths, fe.Path)
	}
	sort.Strings(paths)
	assert.Equal(t, []string{"response.status", "rules[0].limits[0].rate", "rules[1].limits[0].algorithm", "rules[1].name"}, paths)
	assert.Equal(t, 4, strings.Count(err.Error(), "config: "), "one line per error")
}

func TestParseConfigAppliesDocumentedDefaults(t *testing.T) {
	c := mustParse(t, `{"rules": [{"name": "api", "limits": [{"rate": "100/m"}]}]}`)
	assert.True(t, c.Enforce)
	assert.Equal(t, LogInfo, c.LogLevel)
	assert.Nil(t, c.Global)

	resp := c.Response
	assert.Equal(t, uint32(429), resp.Status)
	assert.True(t, resp.QuotaHeadersOnAllowed)
	assert.Equal(t, time.Duration(0), resp.RetryAfterJitter)
	assert.Equal(t, time.Duration(0), resp.WindowJitter)
	assert.Equal(t, "ietf", resp.headerSetNames())
	assert.Equal(t, defaultBody, string(resp.textBody))

	require.Len(t, c.Rules(), 1)
	r := c.Rules()[0]
	assert.Equal(t, "api", r.Name)
	assert.Equal(t, 0, r.Index)
	assert.Equal(t, ScopeLocal, r.Scope)
	assert.False(t, r.Shadow)
	assert.Empty(t, r.ShadowHeader)
	assert.Equal(t, defaultMaxKeys, r.MaxKeys)
	assert.Equal(t, FailAllow, r.FailureMode)
	assert.Equal(t, MissingKeySkip, r.MissingKey)
	limits, unlimited := specs(r.Limits(nil))
	assert.False(t, unlimited)
	require.Len(t, limits, 1)
	assert.Equal(t, "api", limits[0].Name, "a single limit is named after its rule")
	assert.Equal(t, algorithms.Limit{Kind: algorithms.TokenBucket, Quota: 100, Window: time.Minute}, limits[0].Limit)
	cost, err := r.Cost(&fakeRequest{})
	require.NoError(t, err)
	assert.Equal(t, int64(1), cost)
}

func TestParseConfigCompilesEveryField(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "config", "valid", "every-field.json"))
	require.NoError(t, err)
	c, err := ParseConfig(data)
	require.NoError(t, err)

	assert.Equal(t, LogDebug, c.LogLevel)
	assert.Equal(t, &Global{
		Cluster:         "outbound|8081||ratelimit.ratelimit.svc.cluster.local",
		Authority:       "ratelimit.ratelimit.svc.cluster.local", // taken from the Istio cluster name
		Path:            "/json",                                 // an envoyproxy/ratelimit-style path, as configured
		Timeout:         25 * time.Millisecond,
		Secret:          "s3cret",
		BreakerFailures: 3,
		BreakerCooldown: 2 * time.Second,
		ResetPoll:       2 * time.Second,
	}, c.Global)
	assert.Equal(t, "ietf+draft03", c.Response.headerSetNames())
	assert.Equal(t, 2*time.Second, c.Response.RetryAfterJitter)
	assert.Equal(t, time.Second, c.Response.WindowJitter)
	assert.True(t, c.Response.partitionKey)
	assert.NotEqual(t, [2]uint64{}, c.Response.pkKey)

	r := c.Rules()[0]
	assert.Equal(t, ScopeBoth, r.Scope)
	require.Len(t, r.Fallback().Limits, 1)
	assert.Equal(t, int64(5), r.Fallback().Limits[0].Limit.Quota)
	assert.Equal(t, FailDeny, r.FailureMode)
	assert.Equal(t, MissingKeyDefault, r.MissingKey)
	assert.Equal(t, 50000, r.MaxKeys)
	assert.Equal(t, "x-meshlimit-shadow", r.ShadowHeader)
	limits := r.limits() // Limits(nil) would be the override of the "" key
	require.Len(t, limits, 2)
	assert.Equal(t, "per-second", limits[0].Name)
	assert.Equal(t, int64(20), limits[0].Limit.Burst)
	assert.Equal(t, algorithms.SlidingWindow, limits[1].Limit.Kind)
	assert.Equal(t, 1, limits[1].Index)

	u := c.Rules()[1]
	assert.True(t, u.Shadow)
	assert.Equal(t, 10000, u.MaxKeys, "the top-level max_keys is the default")
	assert.Equal(t, []string{"metadata", "filter_metadata", "envoy.filters.http.jwt_authn", "payload", "sub"}, u.key[0].property)
	assert.Equal(t, "per-user", func() string { l, _ := specs(u.Limits(nil)); return l[0].Name }())
}

func TestParseConfigAcceptsIstioStructNumbers(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "config", "valid", "istio-struct-floats.json"))
	require.NoError(t, err)
	c, err := ParseConfig(data)
	require.NoError(t, err)
	r := c.Rules()[0]
	assert.Equal(t, 20000, r.MaxKeys)
	assert.Equal(t, uint32(429), c.Response.Status)
	assert.Equal(t, keyPart{kind: keyClientIP, trustedHops: 1, v4Bits: 24, v6Bits: 64}, r.key[0])
	limits, _ := specs(r.Limits(nil))
	assert.Equal(t, int64(200), limits[0].Limit.Burst)
	assert.Equal(t, costSpec{header: "x-cost", def: 1, max: 100}, r.cost, "1e2 is the integer 100")
}

func TestParseConfigTurnsEveryRuleIntoShadowWhenNotEnforced(t *testing.T) {
	c := mustParse(t, `{"enforce": false, "rules": [
		{"name": "a", "limits": [{"rate": "1/s"}]},
		{"name": "b", "shadow": true, "limits": [{"rate": "1/s"}]}]}`)
	for _, r := range c.Rules() {
		assert.True(t, r.Shadow, r.Name)
	}
	assert.Contains(t, c.Summary(), "enforce=false")
}

func TestParseConfigNamesSeveralLimitsByIndex(t *testing.T) {
	c := mustParse(t, `{"rules": [{"name": "api", "limits": [{"rate": "10/s"}, {"rate": "1000/h"}, {"rate": "5/s", "name": "custom"}]}]}`)
	limits, _ := specs(c.Rules()[0].Limits(nil))
	var names []string
	for _, l := range limits {
		names = append(names, l.Name)
	}
	assert.Equal(t, []string{"api-0", "api-1", "custom"}, names)
}

func TestSummaryIsOneLineDescribingEachRule(t *testing.T) {
	c := mustParse(t, `{"rules": [
		{"name": "api-per-ip", "key": ["client_ip"], "limits": [{"rate": "10/s"}, {"rate": "1000/h"}]},
		{"name": "per-key", "key": [{"header": "x-api-key"}], "limits": [{"rate": "100/m"}],
		 "overrides": [{"value": "a", "unlimited": true}, {"value": "b", "limits": [{"rate": "1000/m"}]}]},
		{"name": "search", "shadow": true, "limits": [{"rate": "5/s"}]}],
		"response": {"rate_limit_headers": ["draft03"]}}`)
	assert.Equal(t,
		"3 rules: api-per-ip(local, 2 limits), per-key(local, 1 limit, 2 overrides), search(local, 1 limit, shadow); enforce=true; headers=draft03",
		c.Summary())
	assert.NotContains(t, c.Summary(), "\n")
}

func TestFingerprintChangesExactlyWhenStateMeaningChanges(t *testing.T) {
	fp := func(doc string) uint64 { return mustParse(t, doc).Rules()[0].Fingerprint() }
	base := fp(`{"rules": [{"name": "a", "key": ["client_ip"], "limits": [{"rate": "10/s"}]}]}`)
	assert.Equal(t, base, fp(`{"rules": [{"name": "a", "key": ["client_ip"], "limits": [{"rate": "10/s"}]}]}`), "is stable")

	same := map[string]string{
		"a rename of rule and policy":        `{"rules": [{"name": "b", "key": ["client_ip"], "limits": [{"rate": "10/s", "name": "x"}]}]}`,
		"an explicit burst equal to quota":   `{"rules": [{"name": "a", "key": ["client_ip"], "limits": [{"rate": "10/s", "burst": 10}]}]}`,
		"the same rate in other units":       `{"rules": [{"name": "a", "key": ["client_ip"], "limits": [{"rate": "10/1000ms"}]}]}`,
		"an added override":                  `{"rules": [{"name": "a", "key": ["client_ip"], "limits": [{"rate": "10/s"}], "overrides": [{"value": "192.0.2.1", "unlimited": true}]}]}`,
		"a new match, cost or shadow flag":   `{"rules": [{"name": "a", "key": ["client_ip"], "limits": [{"rate": "10/s"}], "match": {"methods": ["GET"]}, "cost": 3, "shadow": true}]}`,
		"the default max_keys made explicit": `{"rules": [{"name": "a", "key": ["client_ip"], "limits": [{"rate": "10/s"}], "max_keys": 10000}]}`,
	}
	for name, doc := range same {
		assert.Equal(t, base, fp(doc), "unchanged by %s", name)
	}
	differs := map[string]string{
		"quota":     `{"rules": [{"name": "a", "key": ["client_ip"], "limits": [{"rate": "11/s"}]}]}`,
		"window":    `{"rules": [{"name": "a", "key": ["client_ip"], "limits": [{"rate": "10/2s"}]}]}`,
		"burst":     `{"rules": [{"name": "a", "key": ["client_ip"], "limits": [{"rate": "10/s", "burst": 20}]}]}`,
		"algorithm": `{"rules": [{"name": "a", "key": ["client_ip"], "limits": [{"rate": "10/s", "algorithm": "leaky_bucket"}]}]}`,
		"a limit":   `{"rules": [{"name": "a", "key": ["client_ip"], "limits": [{"rate": "10/s"}, {"rate": "100/h"}]}]}`,
		"key":       `{"rules": [{"name": "a", "key": [{"client_ip": {"ipv4_mask": 24}}], "limits": [{"rate": "10/s"}]}]}`,
		"max_keys":  `{"rules": [{"name": "a", "key": ["client_ip"], "limits": [{"rate": "10/s"}], "max_keys": 500}]}`,
	}
	seen := map[uint64]string{base: "base"}
	for name, doc := range differs {
		f := fp(doc)
		prev, dup := seen[f]
		assert.False(t, dup, "changing the %s gives the fingerprint of %s", name, prev)
		seen[f] = name
	}
}

func TestLimitFingerprintTreatsUnsetBurstAsQuota(t *testing.T) {
	l := algorithms.Limit{Kind: algorithms.TokenBucket, Quota: 10, Window: time.Second}
	withBurst := l
	withBurst.Burst = 10
	assert.Equal(t, limitFingerprint(l), limitFingerprint(withBurst))
	withBurst.Burst = 11
	assert.NotEqual(t, limitFingerprint(l), limitFingerprint(withBurst))
}

func TestParseConfigAcceptsNullAsAbsent(t *testing.T) {
	c := mustParse(t, `{"enforce": null, "global": null, "response": {"status": null, "body": null},
		"rules": [{"name": "a", "cost": null, "max_keys": null, "limits": [{"rate": "1/s", "burst": null}]}]}`)
	assert.True(t, c.Enforce)
	assert.Equal(t, uint32(429), c.Response.Status)
	assert.Equal(t, int64(1), c.Rules()[0].cost.constant)
}

func TestParseConfigAcceptsKeyPartsAsShorthandOrObjects(t *testing.T) {
	c := mustParse(t, `{"rules": [{"name": "a", "key": [
		"client_ip", "path", "method", "host", "route_name",
		{"client_ip": {}}, {"path": true}, {"property": "source.principal"}],
		"limits": [{"rate": "1/s"}]}]}`)
	var kinds []string
	for _, p := range c.Rules()[0].key {
		kinds = append(kinds, p.kind.String())
	}
	assert.Equal(t, []string{"client_ip", "path", "method", "host", "route_name", "client_ip", "path", "property"}, kinds)
	assert.Equal(t, []string{"source", "principal"}, c.Rules()[0].key[7].property)
}

// TestDocsExamplesParse keeps docs/configuration.md honest: every ```json block that holds a
// complete configuration (it has "rules") must parse.
func TestDocsExamplesParse(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "docs", "configuration.md"))
	require.NoError(t, err)
	blocks := regexp.MustCompile("(?s)```json\n(.*?)```").FindAllStringSubmatch(string(data), -1)
	n := 0
	for i, b := range blocks {
		if !strings.HasPrefix(strings.TrimSpace(b[1]), "{") || !strings.Contains(b[1], `"rules"`) {
			continue
		}
		n++
		_, err := ParseConfig([]byte(b[1]))
		assert.NoError(t, err, "json block %d of docs/configuration.md", i)
	}
	assert.GreaterOrEqual(t, n, 3, "the reference has at least three complete examples")
}
