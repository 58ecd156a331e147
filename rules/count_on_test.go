package rules

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func countOnConfig(countOn string, extra ...string) string {
	rule := `{"name":"login","key":["client_ip"],"limits":[{"rate":"5/m"}],"count_on":` + countOn
	for _, e := range extra {
		rule += "," + e
	}
	return `{"global":{"cluster":"outbound|8081||svc.ns.svc.cluster.local"},"response":{"explain_header":"X-Why"},"rules":[` + rule + `}]}`
}

func TestCountOnCompilesStatusesHeadersAndPenalty(t *testing.T) {
	c, err := ParseConfig([]byte(countOnConfig(`{"status":["401","5xx","420-429"],"headers":[{"name":"X-Auth","exact":"fail"}],"penalty":"15m"}`)))
	require.NoError(t, err)
	co := c.Rules()[0].CountOn
	require.NotNil(t, co)
	assert.Equal(t, 15*time.Minute, co.Penalty)
	assert.True(t, co.CountUnanswered, "unanswered requests count by default")
	assert.Equal(t, "x-why", c.Response.ExplainHeader)

	fail := headers{"x-auth": {"fail"}}
	for _, tc := range []struct {
		name   string
		status int
		h      headers
		want   bool
	}{
		{"a listed status with the header counts", 401, fail, true},
		{"a status of a listed class counts", 503, fail, true},
		{"a status in a listed range counts", 425, fail, true},
		{"a status outside every range does not", 404, fail, false},
		{"a listed status without the header does not", 401, headers{}, false},
		{"a listed status with another header value does not", 401, headers{"x-auth": {"ok"}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, co.Counts(tc.status, tc.h))
		})
	}
}

// headers is a HeaderSource over a map of lower-case names.
type headers map[string][]string

func (h headers) HeaderValue(name string, i int) (string, bool) {
	if i < len(h[name]) {
		return h[name][i], true
	}
	return "", false
}

func TestCountOnRejectsEachBadValueNamingItsField(t *testing.T) {
	for _, tc := range []struct {
		name, config, path, msg string
	}{
		{"an empty count_on", countOnConfig(`{}`), "rules[0].count_on", "set status, headers or both"},
		{"a status out of range", countOnConfig(`{"status":["600"]}`), "rules[0].count_on.status[0]", "is not a status"},
		{"a status class out of range", countOnConfig(`{"status":["6xx"]}`), "rules[0].count_on.status[0]", "is not a status"},
		{"a reversed range", countOnConfig(`{"status":["499-400"]}`), "rules[0].count_on.status[0]", "is not a status"},
		{"a status that is not a number", countOnConfig(`{"status":["40x"]}`), "rules[0].count_on.status[0]", "is not a status"},
		{"a header without a name", countOnConfig(`{"headers":[{"exact":"x"}]}`), "rules[0].count_on.headers[0].name", "required"},
		{"a penalty too short", countOnConfig(`{"status":["401"],"penalty":"500ms"}`), "rules[0].count_on.penalty", "out of range: want 1s to 24h"},
		{"a penalty too long", countOnConfig(`{"status":["401"],"penalty":"25h"}`), "rules[0].count_on.penalty", "out of range"},
		{"a penalty that is not a duration", countOnConfig(`{"status":["401"],"penalty":"soon"}`), "rules[0].count_on.penalty", ""},
		{"an unknown field", countOnConfig(`{"status":["401"],"statuses":["401"]}`), "rules[0].count_on.statuses", "unknown field"},
		{"scope both", countOnConfig(`{"status":["401"]}`, `"scope":"both"`), "rules[0].count_on", `not "both"`},
		{"a lease", countOnConfig(`{"status":["401"]}`, `"scope":"global"`, `"lease":{"batch":2}`), "rules[0].count_on", "cannot be combined with lease"},
		{"a fallback", countOnConfig(`{"status":["401"]}`, `"scope":"global"`, `"fallback":[{"rate":"5/m"}]`), "rules[0].count_on", "cannot be combined with fallback"},
		{"a concurrency limit", `{"rules":[{"name":"l","limits":[{"concurrency":5}],"count_on":{"status":["401"]}}]}`, "rules[0].count_on", "concurrency"},
		{"a settled cost", `{"rules":[{"name":"l","limits":[{"rate":"5/m"}],"cost":{"header":"x-max","settle":{"response_header":"x-used"}},"count_on":{"status":["401"]}}]}`, "rules[0].count_on", "reserves and settles"},
		{"a leaky bucket", `{"rules":[{"name":"l","limits":[{"rate":"5/m","algorithm":"leaky_bucket"}],"count_on":{"status":["401"]}}]}`, "rules[0].count_on", "leaky_bucket"},
		{"a bad explain header", `{"response":{"explain_header":"x why"},"rules":[{"name":"l","limits":[{"rate":"5/m"}]}]}`, "response.explain_header", "not a valid header name"},
	} {
		t.Run("rejects "+tc.name, func(t *testing.T) {
			c, err := ParseConfig([]byte(tc.config))
			require.Error(t, err)
			assert.Nil(t, c)
			errs := fieldErrors(t, err)
			require.Len(t, errs, 1, "want exactly one error, got: %v", err)
			assert.Equal(t, tc.path, errs[0].Path)
			assert.Contains(t, errs[0].Msg, tc.msg)
		})
	}
}

func TestTooManyStatusRangesAreRefused(t *testing.T) {
	list := `"401"`
	for range maxStatusRanges {
		list += `,"401"`
	}
	_, err := ParseConfig([]byte(countOnConfig(`{"status":[` + list + `]}`)))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "rules[0].count_on.status: 33 items: at most 32")
}

func FuzzParseStatusRange(f *testing.F) {
	for _, s := range []string{"401", "5xx", "400-404", "600", "499-400", "4XX", "-1", "1xx-2xx", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, ok := parseStatusRange(s)
		if !ok {
			return
		}
		if r.lo < 100 || r.hi > 599 || r.lo > r.hi {
			t.Fatalf("%q parsed to [%d, %d]", s, r.lo, r.hi)
		}
	})
}
