package rules

import (
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// overridesRule is a rule named name keyed on x-user with n overrides (values name-0, name-1, ...)
// of limits limits each; override i's quotas are those of tier i%tiers, so tiers lists are distinct.
func overridesRule(name string, n, limits, tiers int) string {
	var b strings.Builder
	b.WriteString(`{"name":"` + name + `","key":[{"header":"x-user"}],"limits":[{"rate":"1/s"}],"overrides":[`)
	for i := range n {
		if i > 0 {
			b.WriteString(`,`)
		}
		b.WriteString(`{"value":"` + name + `-` + strconv.Itoa(i) + `","limits":[`)
		for j := range limits {
			if j > 0 {
				b.WriteString(`,`)
			}
			b.WriteString(`{"rate":"` + strconv.Itoa(100+j*tiers+i%tiers) + `/s"}`)
		}
		b.WriteString(`]}`)
	}
	b.WriteString(`]}`)
	return b.String()
}

func rulesDoc(rules ...string) string { return `{"rules":[` + strings.Join(rules, ",") + `]}` }

func TestOverridesWithEqualLimitsShareOneListAndKeepTheirOwnSets(t *testing.T) {
	r := mustParse(t, rulesDoc(overridesRule("per-user", 4, 2, 2))).rules[0]
	sets := r.LimitSets()
	require.Len(t, sets, 5)
	assert.Same(t, &sets[1].Limits[0], &sets[3].Limits[0], "per-user-0 and per-user-2 have equal limits: one list")
	assert.Same(t, &sets[2].Limits[0], &sets[4].Limits[0])
	assert.NotSame(t, &sets[1].Limits[0], &sets[2].Limits[0], "tiers that differ keep their own lists")
	for i, set := range sets[1:] {
		assert.Equal(t, i+1, set.Index)
		assert.Equal(t, "per-user-"+strconv.Itoa(i), set.Override, "each override keeps its own set, value and table")
		got, unlimited := r.Limits([]byte(set.Override))
		assert.False(t, unlimited)
		assert.Same(t, &sets[i+1], got)
	}
	assert.Equal(t, int64(101), sets[2].Limits[0].Limit.Quota)
	assert.Equal(t, "per-user-1", sets[1].Limits[1].Name, "a shared list keeps the names its limits would have")
}

func TestOverridesWhoseLimitsDifferOnlyInNameDoNotShare(t *testing.T) {
	r := mustParse(t, `{"rules":[{"name":"r","key":[{"header":"x-user"}],"limits":[{"rate":"1/s"}],"overrides":[
		{"value":"a","limits":[{"rate":"5/s","name":"gold"}]},{"value":"b","limits":[{"rate":"5/s","name":"silver"}]},
		{"value":"c","limits":[{"rate":"5/s","name":"gold"}]}]}]}`).rules[0]
	sets := r.LimitSets()
	assert.NotSame(t, &sets[1].Limits[0], &sets[2].Limits[0])
	assert.Same(t, &sets[1].Limits[0], &sets[3].Limits[0])
	assert.Equal(t, "silver", sets[2].Limits[0].Name)
}

func TestAConfigurationAtTheBoundsOfOverridesAndTheirLimitsCompiles(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles five configurations of up to 100000 overrides (seconds); e2e's TestAConfigurationAtTheBoundsOfOverridesAndLimitsStarts starts them too")
	}
	for _, tc := range []struct {
		name string
		doc  string
	}{
		{"100000 overrides of one distinct limit each", rulesDoc(overridesRule("a", maxOverrides, 1, maxOverrides))},
		{"12500 overrides of 8 distinct limits each", rulesDoc(overridesRule("a", maxOverrideLimits/8, 8, maxOverrideLimits/8))},
		{"100000 overrides of 2 limits in 4 tiers", rulesDoc(overridesRule("a", maxOverrides, 2, 4))},
		{"25000 overrides of 8 limits in 4 tiers", rulesDoc(overridesRule("a", maxOverrideLimitsWritten/8, 8, 4))},
		{"the overrides of two rules, 100000 in all", rulesDoc(overridesRule("a", 60_000, 1, 4), overridesRule("b", 40_000, 1, 4))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseConfig([]byte(tc.doc))
			assert.NoError(t, err)
		})
	}
}

func TestAConfigurationPastTheBoundsOfOverridesOrTheirLimitsIsRefusedNamingTheFieldAndTheBound(t *testing.T) {
	for _, tc := range []struct {
		name, doc, path, msg string
	}{
		{"100001 overrides in one rule", rulesDoc(overridesRule("a", maxOverrides+1, 1, 4)),
			"rules[0].overrides", "100001 overrides, 100001 in the configuration so far: at most 100000 are allowed in the whole configuration"},
		{"100001 overrides in two rules", rulesDoc(overridesRule("a", 60_000, 1, 4), overridesRule("b", 40_001, 1, 4)),
			"rules[1].overrides", "40001 overrides, 100001 in the configuration so far: at most 100000 are allowed in the whole configuration"},
		{"12501 overrides of 8 distinct limits", rulesDoc(overridesRule("a", maxOverrideLimits/8+1, 8, maxOverrideLimits)),
			"rules[0].overrides[12500].limits", "the overrides' distinct limit lists hold 100008 limits so far: at most 100000 are allowed in the whole configuration (overrides with equal limits share one list and count once)"},
		{"100000 overrides writing 3 limits each", rulesDoc(overridesRule("a", maxOverrides, 3, 4)),
			"rules[0].overrides[66666].limits", "the overrides write 200001 limits so far: at most 200000 are allowed in the whole configuration"},
		{"distinct limits of two rules past the bound", rulesDoc(overridesRule("a", 50_000, 1, 50_000), overridesRule("b", 25_001, 2, 25_001)),
			"rules[1].overrides[25000].limits", "the overrides' distinct limit lists hold 100002 limits so far: at most 100000 are allowed in the whole configuration (overrides with equal limits share one list and count once)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseConfig([]byte(tc.doc))
			require.Error(t, err)
			fes := fieldErrors(t, err)
			require.Len(t, fes, 1, "reported once: %v", err)
			assert.Equal(t, tc.path, fes[0].Path)
			assert.Equal(t, tc.msg, fes[0].Msg)
		})
	}
}
