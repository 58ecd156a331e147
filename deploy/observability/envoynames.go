package observability

import (
	"fmt"
	"regexp"
	"strings"
)

// WasmNamespace is the custom stat namespace Envoy puts in front of every metric a Wasm module
// defines: proxy_define_metric("meshlimit.panics") makes the stat "wasmcustom.meshlimit.panics"
// (source/extensions/common/wasm/stats_handler.h, CustomStatNamespace; context.cc, defineMetric).
// The Wasm filter's factory registers the namespace, so Envoy's Prometheus output strips it again.
const WasmNamespace = "wasmcustom"

// StatType is the kind of an Envoy stat: what proxy_define_metric was asked for.
type StatType int

// The stat types, in proxy-wasm's MetricType order.
const (
	Counter StatType = iota
	Gauge
	Histogram
)

// TagSpecifier is one entry of Envoy's stats_config.stats_tags (config.metrics.v3.TagSpecifier)
// with a regex: where the regex matches a stat's name, its first capture group is cut from the
// name and its second (the first when there is no second) becomes the value of the tag Name.
type TagSpecifier struct {
	Name  string `json:"tag_name" yaml:"tag_name"`
	Regex string `json:"regex" yaml:"regex"`
}

// Tagger applies tag specifiers to stat names as Envoy's TagProducer does.
type Tagger struct {
	names []string
	res   []*regexp.Regexp
}

// NewTagger compiles specs. A regex must be one Go's RE2 and Envoy's ECMAScript regexes read
// alike (no lookaround, no backreferences) and must have a capture group.
func NewTagger(specs []TagSpecifier) (*Tagger, error) {
	t := &Tagger{}
	for i, s := range specs {
		re, err := regexp.Compile(s.Regex)
		if err != nil {
			return nil, fmt.Errorf("stats_tags[%d] (%s): %w", i, s.Name, err)
		}
		if re.NumSubexp() == 0 {
			return nil, fmt.Errorf("stats_tags[%d] (%s): the regex has no capture group", i, s.Name)
		}
		t.names, t.res = append(t.names, s.Name), append(t.res, re)
	}
	return t, nil
}

// Extract returns the tag-extracted name of stat and its tags, in specifier order. Every
// specifier runs on the whole name (std::regex_search in TagExtractorStdRegexImpl::extractTag);
// the characters of every first capture group are then removed together.
func (t *Tagger) Extract(stat string) (name string, tags map[string]string) {
	cut := make([]bool, len(stat))
	for i, re := range t.res {
		m := re.FindStringSubmatchIndex(stat)
		if m == nil || m[2] < 0 {
			continue
		}
		value := stat[m[2]:m[3]]
		if len(m) > 5 && m[4] >= 0 {
			value = stat[m[4]:m[5]]
		}
		if tags == nil {
			tags = map[string]string{}
		}
		tags[sanitize(t.names[i])] = value
		for j := m[2]; j < m[3]; j++ {
			cut[j] = true
		}
	}
	var b strings.Builder
	for i := range len(stat) {
		if !cut[i] {
			b.WriteByte(stat[i])
		}
	}
	return b.String(), tags
}

// PrometheusName is the name Envoy's /stats/prometheus gives a tag-extracted stat name
// (PrometheusStatsFormatter::metricName): a name in a registered custom namespace loses the
// namespace and is not prefixed; any other is prefixed with "envoy_"; every character outside
// [a-zA-Z0-9_] becomes "_". ok is false for a custom name that would start with a digit, which
// Envoy leaves out of the output.
func PrometheusName(extracted string, namespaces ...string) (name string, ok bool) {
	if ns, rest, found := strings.Cut(extracted, "."); found {
		for _, n := range namespaces {
			if ns == n {
				s := sanitize(rest)
				return s, s != "" && (s[0] < '0' || s[0] > '9')
			}
		}
	}
	return "envoy_" + sanitize(extracted), true
}

// Series returns the Prometheus series names of a metric family of type typ: the name itself for
// a counter (Envoy adds no "_total") or a gauge, the _bucket, _sum and _count series for a
// histogram.
func Series(family string, typ StatType) []string {
	if typ == Histogram {
		return []string{family + "_bucket", family + "_sum", family + "_count"}
	}
	return []string{family}
}

// WasmSeries returns the Prometheus series that the Wasm metric name (as the module defined it)
// of type typ has in Envoy's output with the tag specifiers of t, and the labels the tags add;
// none when Envoy leaves it out.
func (t *Tagger) WasmSeries(metric string, typ StatType) (series []string, labels map[string]string) {
	extracted, tags := t.Extract(WasmNamespace + "." + metric)
	family, ok := PrometheusName(extracted, WasmNamespace)
	if !ok {
		return nil, nil
	}
	return Series(family, typ), tags
}

// sanitize replaces every character outside [a-zA-Z0-9_] with "_", as Envoy's sanitizeName does
// for metric and tag names (RE2 replaceAll of [^a-zA-Z0-9_]: one "_" per code point).
func sanitize(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '_' || '0' <= r && r <= '9' || 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' {
			return r
		}
		return '_'
	}, s)
}
