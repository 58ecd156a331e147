package observability

import (
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// Envoy's own examples of metric names in its Prometheus output, from
// test/server/admin/prometheus_stats_test.cc (SanitizeMetricName, SanitizeMetricNameDigitFirst,
// CustomNamespace, CustomNamespaceWithInvalidPromnamespace: the namespace "promstattest" is
// registered there as the Wasm filter registers "wasmcustom").
func TestPrometheusNamesAreEnvoys(t *testing.T) {
	for _, tc := range []struct {
		name, stat, want string
		ok               bool
	}{
		{"a native stat is prefixed with envoy_ and sanitized", "An.artist.plays-violin@019street", "envoy_An_artist_plays_violin_019street", true},
		{"a native stat may start with a digit", "3.artists.play-violin@019street", "envoy_3_artists_play_violin_019street", true},
		{"a stat of a custom namespace loses the namespace and gets no prefix", "promstattest.vulture.eats-liver", "vulture_eats_liver", true},
		{"a custom stat that would start with a digit is left out", "promstattest.1234abcd.eats-liver", "", false},
		{"a namespace counts only as the first element", "foo.promstattest.x", "envoy_foo_promstattest_x", true},
		{"a non-ASCII character becomes one underscore", "promstattest.caf\u00e9", "caf_", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := PrometheusName(tc.stat, "promstattest")
			assert.Equal(t, tc.ok, ok)
			if tc.ok {
				assert.Equal(t, tc.want, got)
			}
		})
	}
}

// Envoy's examples of series of each type (prometheus_stats_test.cc, OutputWithAllMetricTypes:
// envoy_cluster_test_1_upstream_cx_total is a counter as it is named, a histogram has
// _bucket, _sum and _count series).
func TestSeriesFollowTheStatType(t *testing.T) {
	assert.Equal(t, []string{"envoy_cluster_test_1_upstream_cx_total"}, Series("envoy_cluster_test_1_upstream_cx_total", Counter))
	assert.Equal(t, []string{"envoy_cluster_test_3_upstream_cx_total"}, Series("envoy_cluster_test_3_upstream_cx_total", Gauge))
	assert.Equal(t, []string{"envoy_cluster_test_1_upstream_rq_time_bucket", "envoy_cluster_test_1_upstream_rq_time_sum",
		"envoy_cluster_test_1_upstream_rq_time_count"}, Series("envoy_cluster_test_1_upstream_rq_time", Histogram))
}

// Envoy's examples of tag extraction, from the TagSpecifier documentation
// (api/envoy/config/metrics/v3/stats.proto): the first group is cut, the second is the value.
func TestTagExtractionIsEnvoys(t *testing.T) {
	tg, err := NewTagger([]TagSpecifier{{Name: "envoy.cluster_name", Regex: `^cluster\.((.+?)\.)`}})
	require.NoError(t, err)
	name, tags := tg.Extract("cluster.foo_cluster.upstream_rq_timeout")
	assert.Equal(t, "cluster.upstream_rq_timeout", name)
	assert.Equal(t, map[string]string{"envoy_cluster_name": "foo_cluster"}, tags)

	// Example 2: two specifiers, each on the original name, both cuts applied at the end (the
	// first regex's lookahead, ^http(?=\.).*?, written as RE2 reads it).
	tg, err = NewTagger([]TagSpecifier{
		{Name: "envoy.http_user_agent", Regex: `^http(?:\..*?)?\.user_agent\.((.+?)\.)\w+?$`},
		{Name: "envoy.http_conn_manager_prefix", Regex: `^http\.((.*?)\.)`},
	})
	require.NoError(t, err)
	name, tags = tg.Extract("http.connection_manager_1.user_agent.ios.downstream_cx_total")
	assert.Equal(t, "http.user_agent.downstream_cx_total", name)
	assert.Equal(t, map[string]string{"envoy_http_user_agent": "ios", "envoy_http_conn_manager_prefix": "connection_manager_1"}, tags)

	// Without a second group the first is the value.
	tg, err = NewTagger([]TagSpecifier{{Name: "code", Regex: `_rq_(\d{3})$`}})
	require.NoError(t, err)
	name, tags = tg.Extract("cluster.x.upstream_rq_503")
	assert.Equal(t, "cluster.x.upstream_rq_", name)
	assert.Equal(t, "503", tags["code"])
}

func TestATagSpecifierWithoutACaptureGroupIsRefused(t *testing.T) {
	_, err := NewTagger([]TagSpecifier{{Name: "x", Regex: `^cluster\.`}})
	assert.ErrorContains(t, err, "stats_tags[0] (x): the regex has no capture group")
	_, err = NewTagger([]TagSpecifier{{Name: "y", Regex: `(`}})
	assert.ErrorContains(t, err, "stats_tags[0] (y)")
}

// shippedTags reads the tag specifiers meshlimit ships for plain Envoy.
func shippedTags(t testing.TB) []TagSpecifier {
	t.Helper()
	b, err := os.ReadFile("envoy/stats-tags.yaml")
	require.NoError(t, err)
	var doc struct {
		StatsConfig struct {
			StatsTags []TagSpecifier `yaml:"stats_tags"`
		} `yaml:"stats_config"`
	}
	require.NoError(t, yaml.Unmarshal(b, &doc))
	require.NotEmpty(t, doc.StatsConfig.StatsTags)
	return doc.StatsConfig.StatsTags
}

// The filter's metric names (filter/metrics.go, filter/global.go, filter/shed.go) under the tag
// specifiers of envoy/stats-tags.yaml: the names of rules, shedders and classes become labels.
func TestTheShippedTagsTurnNamesIntoLabels(t *testing.T) {
	tg, err := NewTagger(shippedTags(t))
	require.NoError(t, err)
	for _, tc := range []struct {
		metric string
		typ    StatType
		series string
		labels map[string]string
	}{
		{"meshlimit.panics", Counter, "meshlimit_panics", nil},
		{"meshlimit.global.breaker_opened", Counter, "meshlimit_global_breaker_opened", nil},
		{"meshlimit.rule.api.limited", Counter, "meshlimit_rule_limited", map[string]string{"meshlimit_rule": "api"}},
		{"meshlimit.rule.per-user_2.shadow_limited", Counter, "meshlimit_rule_shadow_limited", map[string]string{"meshlimit_rule": "per-user_2"}},
		{"meshlimit.rule.shed.allowed", Counter, "meshlimit_rule_allowed", map[string]string{"meshlimit_rule": "shed"}},
		{"meshlimit.shed.critical.shed", Counter, "meshlimit_shed_shed", map[string]string{"meshlimit_shed_class": "critical"}},
		{"meshlimit.shed.capacity.admitted", Counter, "meshlimit_shed_admitted", map[string]string{"meshlimit_shed_class": "capacity"}},
		{"meshlimit.shed.sheddable.in_flight", Gauge, "meshlimit_shed_in_flight", map[string]string{"meshlimit_shed_class": "sheddable"}},
		{"meshlimit.shed.capacity", Gauge, "meshlimit_shed_capacity", nil},
		{"meshlimit.shed.reclaimed", Counter, "meshlimit_shed_reclaimed", nil},
		{"meshlimit.shed.Edge-1.critical.shadow_shed", Counter, "meshlimit_shed_shadow_shed", map[string]string{"meshlimit_shedder": "Edge-1", "meshlimit_shed_class": "critical"}},
		{"meshlimit.shed.edge.capacity", Gauge, "meshlimit_shed_capacity", map[string]string{"meshlimit_shedder": "edge"}},
		{"meshlimit.shed.capacity.capacity", Gauge, "meshlimit_shed_capacity", map[string]string{"meshlimit_shedder": "capacity"}},
	} {
		t.Run(tc.metric, func(t *testing.T) {
			series, labels := tg.WasmSeries(tc.metric, tc.typ)
			assert.Equal(t, []string{tc.series}, series)
			assert.Equal(t, tc.labels, labels)
		})
	}
}

// Without tag specifiers (Envoy's defaults and Istio's own match none of meshlimit's names) the
// names of rules stay in the series names.
func TestWithoutTheTagsARuleNameStaysInTheSeriesName(t *testing.T) {
	tg, err := NewTagger(nil)
	require.NoError(t, err)
	series, labels := tg.WasmSeries("meshlimit.rule.per-user.limited", Counter)
	assert.Equal(t, []string{"meshlimit_rule_per_user_limited"}, series)
	assert.Nil(t, labels)
}

// Istio's bootstrap (tools/packaging/common/envoy_bootstrap.json in istio/istio) has tag
// specifiers that are not anchored; those below read alike in RE2. They leave meshlimit's names
// alone, except a rule whose name ends in "rbac" and a shedder whose name ends in "cache",
// "component" or "wasm_filter", which docs/observability.md says to avoid.
func TestIstiosUnanchoredTagsTakeOnlyTheNamesTheDocsWarnOf(t *testing.T) {
	istio := []TagSpecifier{
		{Name: "cache", Regex: `(cache\.(.+?)\.)`},
		{Name: "component", Regex: `(component\.(.+?)\.)`},
		{Name: "tag", Regex: `(tag\.(.+?);\.)`},
		{Name: "wasm_filter", Regex: `(wasm_filter\.(.+?)\.)`},
		{Name: "authz_enforce_result", Regex: `rbac(\.(allowed|denied))`},
		{Name: "authz_dry_run_action", Regex: `(\.istio_dry_run_(allow|deny)_)`},
		{Name: "authz_dry_run_result", Regex: `(\.shadow_(allowed|denied))`},
		{Name: "response_code", Regex: `_rq(_(\d{3}))$`},
		{Name: "response_code_class", Regex: `_rq(_(\dxx))$`},
	}
	tg, err := NewTagger(istio)
	require.NoError(t, err)
	for _, tc := range []struct {
		stat    string
		touched bool
	}{
		{"meshlimit.rule.api.allowed", false},
		{"meshlimit.rule.cache.cached_denials", false},
		{"meshlimit.rule.component.limited", false},
		{"meshlimit.rule.tag.shadow_limited", false},
		{"meshlimit.shed.cache.admitted", false},
		{"meshlimit.shed.edge.cache.in_flight", false},
		{"meshlimit.rule.authz-rbac.allowed", true},
		{"meshlimit.shed.mycache.critical.shed", true},
		{"meshlimit.shed.component.default.admitted", true},
		{"meshlimit.shed.wasm_filter.capacity", false},
		{"meshlimit.shed.wasm_filter.critical.shed", true},
	} {
		name, tags := tg.Extract(WasmNamespace + "." + tc.stat)
		assert.Equal(t, tc.touched, len(tags) > 0, "%s -> %s %v", tc.stat, name, tags)
	}
}
