package rules

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func globalDoc(rule string) string {
	return `{"global":{"cluster":"outbound|8081||meshlimit.meshlimit.svc.cluster.local"},"rules":[{"name":"gpu",` + rule + `}]}`
}

func TestAGlobalConcurrencyRuleFallsBackToALocalConcurrencyLimit(t *testing.T) {
	c := mustParse(t, globalDoc(`"key":[{"header":"x-tenant"}],"scope":"global","limits":[{"concurrency":50}],"fallback":[{"concurrency":10}]`))
	r := c.Rules()[0]
	fb := r.FallbackConcurrency()
	require.NotNil(t, fb)
	assert.Equal(t, int64(10), fb.Concurrency)
	assert.Equal(t, int64(50), r.Concurrency().Concurrency)
	rate := mustParse(t, globalDoc(`"scope":"global","limits":[{"rate":"5/s"}],"fallback":[{"rate":"1/s"}]`)).Rules()[0]
	assert.Nil(t, rate.FallbackConcurrency(), "a rate fallback is no concurrency fallback")
}

func TestConcurrencyFallbackErrorsNameTheirField(t *testing.T) {
	tests := []struct{ name, rule, path string }{
		{"a concurrency rule cannot fall back to a rate", `"scope":"global","limits":[{"concurrency":5}],"fallback":[{"rate":"5/s"}]`, "rules[0].fallback"},
		{"a concurrency rule falls back to one limit", `"scope":"global","limits":[{"concurrency":5}],"fallback":[{"concurrency":2},{"concurrency":3}]`, "rules[0].fallback"},
		{"a rule with scope both takes no concurrency fallback", `"scope":"both","limits":[{"concurrency":5}],"fallback":[{"concurrency":2}]`, "rules[0].fallback"},
		{"a local concurrency rule takes no fallback", `"limits":[{"concurrency":5}],"fallback":[{"concurrency":2}]`, "rules[0].fallback"},
		{"a rate rule cannot fall back to a concurrency limit", `"scope":"global","limits":[{"rate":"5/s"}],"fallback":[{"concurrency":2}]`, "rules[0].fallback[0].concurrency"},
		{"a zero fallback concurrency is refused", `"scope":"global","limits":[{"concurrency":5}],"fallback":[{"concurrency":0}]`, "rules[0].fallback[0].concurrency"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseConfig([]byte(globalDoc(tt.rule)))
			require.Error(t, err)
			paths := []string{}
			for _, fe := range fieldErrors(t, err) {
				paths = append(paths, fe.Path)
			}
			assert.Contains(t, paths, tt.path, "%v", err)
		})
	}
}
