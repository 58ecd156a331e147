package rules

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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

// TestAPluginNameThatMakesDescriptorKeysTooLongIsRefusedAtStart: the plugin name prefixes every
// descriptor key and is only known at plugin start (the plugin_name property).
func TestAPluginNameThatMakesDescriptorKeysTooLongIsRefusedAtStart(t *testing.T) {
	c := mustParse(t, globalRules(1, 1))
	assert.NoError(t, c.CheckPluginName("istio-system.meshlimit"))
	long := strings.Repeat("p", 300)
	err := c.CheckPluginName(long)
	require.Error(t, err)
	errs := fieldErrors(t, err)
	assert.Equal(t, "rules[0].name", errs[0].Path)
	assert.Contains(t, errs[0].Msg, "the decision service accepts 512")

	limit := ServiceMaxKeyBytes - c.Rules()[0].maxDescriptorKey(0)
	assert.NoError(t, c.CheckPluginName(strings.Repeat("p", limit)), "the longest name that fits")
	assert.Error(t, c.CheckPluginName(strings.Repeat("p", limit+1)))
	assert.Error(t, c.CheckPluginName("bad\x00name"), "the service refuses control characters in keys")
	assert.Error(t, c.CheckPluginName("bad\xffname"), "and keys that are not UTF-8")

	local := mustParse(t, `{"rules":[{"name":"l","limits":[{"rate":"1/s"}]}]}`)
	assert.NoError(t, local.CheckPluginName(long), "without global rules the name is never sent")
}
