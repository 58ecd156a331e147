package rules

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/algorithms"
)

// The RateLimit-Policy members are rendered once when a configuration is compiled; a LimitSpec built
// by hand has none and is rendered per call. Both must give the same headers.
func TestQuotaHeadersAreTheSameWhetherPoliciesWereRenderedAtCompileOrPerRequest(t *testing.T) {
	cfg, err := ParseConfig([]byte(`{"rules":[
		{"name":"api","key":["client_ip"],"limits":[{"name":"burst","rate":"10/s"},{"name":"Hourly.v2","rate":"1000/h","algorithm":"fixed_window"}]},
		{"name":"one","key":["client_ip"],"limits":[{"rate":"5/1500ms"}]}],
		"response":{"rate_limit_headers":["ietf","draft03"]}}`))
	require.NoError(t, err)
	compiled := append(append([]LimitSpec(nil), cfg.Rules()[0].LimitSets()[0].Limits...), cfg.Rules()[1].LimitSets()[0].Limits...)
	for i := range compiled {
		require.NotNil(t, compiled[i].policy, "%s was rendered at compile", compiled[i].Name)
	}
	byHand := make([]LimitSpec, len(compiled))
	for i := range compiled {
		byHand[i] = LimitSpec{Name: compiled[i].Name, Limit: compiled[i].Limit, Index: compiled[i].Index}
	}
	decisions := []algorithms.Decision{
		{Allowed: true, Remaining: 3, Reset: 700 * time.Millisecond},
		{Allowed: true, Remaining: 998, Reset: 40 * time.Minute},
		{Allowed: true, Remaining: 4, Reset: 300 * time.Millisecond},
	}
	render := func(specs []LimitSpec, which ...int) []string {
		outcomes := make([]Outcome, 0, len(which))
		for _, i := range which {
			outcomes = append(outcomes, Outcome{Limit: &specs[i], Decision: decisions[i]})
		}
		fields, _ := cfg.Response.AppendAllowed(nil, nil, outcomes, 0)
		var out []string
		for _, f := range fields {
			out = append(out, f.Name+": "+string(f.Value))
		}
		return out
	}
	for _, which := range [][]int{{0}, {1}, {2}, {0, 1}, {1, 0}, {0, 1, 2}} {
		want := render(byHand, which...)
		assert.Equal(t, want, render(compiled, which...), "outcomes %v", which)
		assert.Len(t, want, 5, "both header sets are rendered")
	}
	assert.Equal(t, []string{
		`ratelimit-policy: "one";q=5;w=2;qu="requests"`,
		`ratelimit: "one";r=4;t=1`,
		`x-ratelimit-limit: 5, 5;w=2;name="one"`,
		`x-ratelimit-remaining: 4`,
		`x-ratelimit-reset: 1`,
	}, render(compiled, 2))
}

func TestAPolicyRenderedAtCompileIsNeverWrittenByRendering(t *testing.T) {
	cfg, err := ParseConfig([]byte(`{"rules":[{"name":"api","key":["client_ip"],"limits":[{"rate":"10/s"}]}]}`))
	require.NoError(t, err)
	spec := &cfg.Rules()[0].LimitSets()[0].Limits[0]
	before := string(spec.policy)
	buf := make([]byte, 0, 256)
	for _, remaining := range []int64{9, 123456, 0} {
		fields, b := cfg.Response.AppendAllowed(nil, buf[:0], []Outcome{{Limit: spec, Decision: algorithms.Decision{Allowed: true, Remaining: remaining, Reset: time.Second}}}, 0)
		buf = b
		require.Len(t, fields, 2)
		fields[1].Value = append(fields[1].Value[:0], "overwritten by a careless caller"...)
	}
	assert.Equal(t, before, string(spec.policy))
	assert.Equal(t, `"api";q=10;w=1;qu="requests"`, before)
}
