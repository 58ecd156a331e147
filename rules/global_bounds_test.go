package rules

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/wire"
)

// globalRules returns a configuration of n global rules with k limits each.
func globalRules(n, k int) string {
	var rules []string
	for i := range n {
		var limits []string
		for j := range k {
			limits = append(limits, fmt.Sprintf(`{"name":"r%d-l%d","rate":"%d/m"}`, i, j, j+1))
		}
		rules = append(rules, fmt.Sprintf(`{"name":"r%d","scope":"global","key":["client_ip"],"limits":[%s]}`, i, strings.Join(limits, ",")))
	}
	return `{"global":{"cluster":"outbound|8081||meshlimit.meshlimit.svc.cluster.local"},"rules":[` + strings.Join(rules, ",") + `]}`
}

// TestAConfigurationWhoseRequestsCarryMoreDescriptorsThanTheServiceAcceptsIsRefused is finding 6 of
// issue 10: nine global rules of eight limits ask about 72 limits per request, and the service refuses
// a check of more than 64 with a 400, so such a configuration would never enforce anything.
func TestAConfigurationWhoseRequestsCarryMoreDescriptorsThanTheServiceAcceptsIsRefused(t *testing.T) {
	_, err := ParseConfig([]byte(globalRules(9, 8)))
	require.Error(t, err)
	errs := fieldErrors(t, err)
	require.Len(t, errs, 1)
	assert.Equal(t, "rules", errs[0].Path)
	assert.Contains(t, errs[0].Msg, "72 limits at once")
	assert.Contains(t, errs[0].Msg, "at most 64")

	_, err = ParseConfig([]byte(globalRules(8, 8)))
	assert.NoError(t, err, "64 descriptors is what the service accepts")
}

func TestOnlyRulesThatAskTheServiceCountTowardsItsBound(t *testing.T) {
	for _, tc := range []struct {
		name, config string
		ok           bool
	}{
		{"local rules send nothing to the service", strings.Replace(globalRules(9, 8), `"scope":"global",`, ``, 1), true},
		{"a both-scope rule sends its limits too", strings.ReplaceAll(globalRules(9, 8), `"scope":"global"`, `"scope":"both"`), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseConfig([]byte(tc.config))
			assert.Equal(t, tc.ok, err == nil, "%v", err)
		})
	}
}

// longRuleNames is globalRules with rule names of 64 bytes, the longest the configuration allows, so
// that its descriptor keys are the longest the plugin name can lengthen.
func longRuleNames(n, k int) string {
	doc := globalRules(n, k)
	for i := range n {
		long := fmt.Sprintf("r%d-%s", i, strings.Repeat("x", 64))[:64]
		doc = strings.ReplaceAll(doc, fmt.Sprintf(`"name":"r%d"`, i), fmt.Sprintf(`"name":%q`, long))
	}
	return doc
}

// TestALongPluginNameIsAcceptedAtStartBecauseTheEncoderHashesIt is finding 8 of issue 21: the plugin
// name prefixes every descriptor key and is only known at plugin start (the plugin_name property).
// The encoder sends a plugin part longer than wire.MaxPluginBytes hashed, so no name makes a key too
// long: a 200-byte name was refused ("descriptor keys reach 532 bytes") although its keys are of 218
// bytes at most, and Istio's "<namespace>.<name>" (a namespace of up to 63 bytes, a WasmPlugin name
// of up to 253) reaches that.
func TestALongPluginNameIsAcceptedAtStartBecauseTheEncoderHashesIt(t *testing.T) {
	c := mustParse(t, longRuleNames(2, 8))
	for _, name := range []string{
		"istio-system.meshlimit",
		strings.Repeat("p", 200),
		strings.Repeat("n", 63) + "." + strings.Repeat("w", 64),  // 128 bytes: the longest sent as is
		strings.Repeat("n", 63) + "." + strings.Repeat("w", 65),  // 129: the shortest sent hashed
		strings.Repeat("n", 63) + "." + strings.Repeat("w", 253), // the longest Istio name
	} {
		assert.NoError(t, c.CheckPluginName(name), "a plugin name of %d bytes", len(name))
	}
	local := mustParse(t, `{"rules":[{"name":"l","limits":[{"rate":"1/s"}]}]}`)
	assert.NoError(t, local.CheckPluginName(strings.Repeat("p", 300)), "without global rules the name is never sent")
}

// TestAPluginNameIsRefusedExactlyWhenTheServiceRefusesTheKeysItPrefixes: whatever the plugin name,
// CheckPluginName accepts it when the service accepts the longest descriptor key the filter sends
// with it (its longest fingerprint, the longest key value sent as is), and refuses it otherwise: the
// request is written with the filter's encoder and read with the service's decoder.
func TestAPluginNameIsRefusedExactlyWhenTheServiceRefusesTheKeysItPrefixes(t *testing.T) {
	c := mustParse(t, longRuleNames(2, 8))
	var names []string
	for n := 0; n <= 600; n += 25 {
		names = append(names, strings.Repeat("p", n))
	}
	names = append(names, "bad\x00name", "bad\xffname", "tab\tname", "\u0085", `quote"and\backslash`, "é"+strings.Repeat("e", 127))
	for _, name := range names {
		refused := false
		for _, r := range c.Rules() {
			var fp uint64
			for _, set := range r.LimitSets() {
				for _, l := range set.Limits {
					fp = max(fp, l.Fingerprint)
				}
			}
			l := r.LimitSets()[0].Limits[0]
			k := wire.Key{Plugin: name, Rule: r.Name, Fingerprint: fp, Value: strings.Repeat("v", wire.MaxValueBytes)}
			body := wire.AppendRequestEnd(wire.AppendDescriptor(wire.AppendRequestStart(nil), 0, k, l.Limit, 1))
			var req wire.Request
			refused = refused || wire.DecodeRequest(body, wire.DecodeOptions{}, &req) != nil
		}
		err := c.CheckPluginName(name)
		assert.Equal(t, refused, err != nil, "a plugin name of %d bytes, %.20q: %v", len(name), name, err)
	}
}
