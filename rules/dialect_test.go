package rules

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/algorithms"
)

// withDialect adds d to the table for the test.
func withDialect(t *testing.T, d *dialect) {
	t.Helper()
	saved := dialects
	dialects = append(slices.Clip(saved), d)
	t.Cleanup(func() { dialects = saved })
}

// renamed is a dialect shaped like the one an open pull request of the draft proposes (r and t
// renamed a and w, a cost parameter c), with policy parameters renamed too: a test entry, not one
// meshlimit ships.
var renamed = &dialect{
	name: "test-renamed", fields: []string{HeaderRateLimitPolicy, HeaderRateLimit}, render: appendStructured,
	quota: "quota", unit: "unit", window: "win", partition: "part", available: "a", effective: "w", cost: "c",
}

// TestANewDialectIsOneEntryOfTheTable: a dialect that renames every parameter and adds the cost is
// accepted by response.rate_limit_headers and rendered, compiled or built by hand, from its entry
// alone; it cannot be listed with another that writes the same fields.
func TestANewDialectIsOneEntryOfTheTable(t *testing.T) {
	withDialect(t, renamed)
	c := mustParse(t, `{"response": {"rate_limit_headers": ["test-renamed"], "quota_headers_on_allowed": true},
		"rules": [{"name": "api", "limits": [{"name": "per-hour", "rate": "100/h"}]}]}`)
	assert.Equal(t, "test-renamed", c.Response.headerSetNames())
	set, _ := c.Rules()[0].Limits([]byte("k"))
	d, _, _ := decisions(t, set.Limits[0].Limit, [2]int64{0, 1}, [2]int64{0, 1})
	for _, o := range []Outcome{
		{Limit: &set.Limits[0], Decision: d[1], Cost: 1},
		{Limit: &LimitSpec{Name: "per-hour", Limit: set.Limits[0].Limit}, Decision: d[1], Cost: 1},
	} {
		fields, _ := c.Response.AppendAllowed(nil, nil, []Outcome{o}, 0)
		pol, _ := header(t, fields, HeaderRateLimitPolicy)
		assert.Equal(t, `"per-hour";quota=100;win=3600;unit="requests"`, pol)
		rl, _ := header(t, fields, HeaderRateLimit)
		assert.Equal(t, `"per-hour";a=98;w=36;c=1`, rl)
	}

	_, err := ParseConfig([]byte(`{"response": {"rate_limit_headers": ["ietf", "test-renamed"]}, "rules": [{"name": "r", "limits": [{"rate": "1/s"}]}]}`))
	require.Error(t, err)
	assert.Contains(t, err.Error(), `response.rate_limit_headers[1]: "test-renamed" writes a field that "ietf" writes too`)
	_, err = ParseConfig([]byte(`{"response": {"rate_limit_headers": ["ietf-12"]}, "rules": [{"name": "r", "limits": [{"rate": "1/s"}]}]}`))
	require.Error(t, err)
	assert.Contains(t, err.Error(), `unknown header set "ietf-12" (want ietf, draft03, test-renamed, none)`)
}

// TestTheIETFDialectWritesDraft11sParameters pins the shipped entry: q, qu, w, pk on RateLimit-Policy
// and r, t, pk on RateLimit, no cost; and draft03 beside it.
func TestTheIETFDialectWritesDraft11sParameters(t *testing.T) {
	c := mustParse(t, `{"response": {"rate_limit_headers": ["draft03", "ietf"], "partition_key": true},
		"rules": [{"name": "api", "key": ["client_ip"], "limits": [{"name": "per-hour", "rate": "100/h"}]}]}`)
	set, _ := c.Rules()[0].Limits([]byte("k"))
	d, _, _ := decisions(t, set.Limits[0].Limit, [2]int64{0, 1})
	pk := c.Response.Partition(c.Rules()[0], []byte("k"))
	fields, _ := c.Response.AppendAllowed(nil, nil, []Outcome{{Limit: &set.Limits[0], Decision: d[0], Partition: pk, Cost: 1}}, 0)
	names := make([]string, len(fields))
	for i, f := range fields {
		names[i] = f.Name
	}
	assert.Equal(t, []string{"ratelimit-policy", "ratelimit", "x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset"}, names,
		"the dialects write in the order of the table, not of the configuration")
	pol, _ := header(t, fields, HeaderRateLimitPolicy)
	assert.Regexp(t, `^"per-hour";q=100;w=3600;qu="requests";pk=:[A-Za-z0-9+/=]+:$`, pol)
	rl, _ := header(t, fields, HeaderRateLimit)
	assert.Regexp(t, `^"per-hour";r=99;t=36;pk=:[A-Za-z0-9+/=]+:$`, rl)
	reset, _ := header(t, fields, HeaderXRateLimitReset)
	assert.Equal(t, "36", reset, "X-RateLimit-Reset is the first member's t")
}

// TestAConcurrencyLimitHasNoTInAnyDialect: the effective window is a time, and a permit comes back
// when a request ends.
func TestAConcurrencyLimitHasNoTInAnyDialect(t *testing.T) {
	withDialect(t, renamed)
	slots := &LimitSpec{Name: "slots", Concurrency: 3}
	for _, set := range []string{"ietf", "test-renamed"} {
		r := responseOf(t, `{"rate_limit_headers": ["`+set+`"]}`)
		fields, _ := r.AppendAllowed(nil, nil, []Outcome{{Limit: slots, Decision: algorithms.Decision{Allowed: true, Limit: 3, Remaining: 1}}}, 0)
		rl, _ := header(t, fields, HeaderRateLimit)
		assert.NotContains(t, rl, "t=", set)
		assert.NotContains(t, rl, ";w=", set)
	}
}
