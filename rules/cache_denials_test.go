package rules

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// cacheDenialsConfig is one rule with the given fields, under a global service.
func cacheDenialsConfig(fields string) string {
	return `{"global":{"cluster":"outbound|8081||svc.ns.svc.cluster.local"},"rules":[{"name":"login",
		"key":[{"header":"x-user"}],"limits":[{"rate":"5/m"}]` + fields + `}]}`
}

func TestCacheDenialsIsOnForGlobalRulesUnlessTurnedOff(t *testing.T) {
	for _, tc := range []struct {
		name, fields string
		want         bool
	}{
		{"a global rule caches denials by default", `,"scope":"global"`, true},
		{"a both rule caches denials by default", `,"scope":"both"`, true},
		{"a global rule can turn the cache off", `,"scope":"global","cache_denials":false`, false},
		{"a both rule can turn the cache off", `,"scope":"both","cache_denials":false`, false},
		{"a global rule can say true, the default", `,"scope":"global","cache_denials":true`, true},
		{"a leasing rule can turn the cache off", `,"scope":"global","lease":{"batch":2},"cache_denials":false`, false},
		{"a counted global rule keeps its cache", `,"scope":"global","count_on":{"status":["401"],"penalty":"1m"},"cache_denials":true`, true},
		{"a local rule has no cache", ``, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := mustParse(t, cacheDenialsConfig(tc.fields))
			assert.Equal(t, tc.want, c.Rules()[0].CacheDenials)
		})
	}
}

func TestCacheDenialsRejectsWhatItCannotDoNamingTheField(t *testing.T) {
	for _, tc := range []struct {
		name, fields, msg string
	}{
		{"a local rule has no denials to cache", `,"cache_denials":false`, "only rules with scope global or both"},
		{"a local rule cannot even say true", `,"cache_denials":true`, "only rules with scope global or both"},
		{"a counted global rule with a penalty keeps its penalty in the cache",
			`,"scope":"global","count_on":{"status":["401"],"penalty":"15m"},"cache_denials":false`, "cannot be combined with count_on"},
		{"a counted global rule without a penalty denies from the cache too",
			`,"scope":"global","count_on":{"status":["401"]},"cache_denials":false`, "cannot be combined with count_on"},
		{"a string is not a boolean", `,"scope":"global","cache_denials":"no"`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ParseConfig([]byte(cacheDenialsConfig(tc.fields)))
			require.Error(t, err)
			assert.Nil(t, c)
			errs := fieldErrors(t, err)
			require.Len(t, errs, 1, "want exactly one error, got: %v", err)
			assert.Equal(t, "rules[0].cache_denials", errs[0].Path)
			assert.Contains(t, errs[0].Msg, tc.msg)
		})
	}
}
