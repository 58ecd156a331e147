package rules

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/algorithms"
	"github.com/meshlimit/meshlimit/rules/body"
)

const tokenRule = `{"name": "tokens", "key": [{"header": "x-user"}], "limits": [{"rate": "1000/m"}],
	"cost": {"request_json": "max_tokens", "default": 500, "max": 4000, "settle": {"response_json": "usage.total_tokens"}}}`

func TestASettlingCostCompilesItsReservationAndSettlement(t *testing.T) {
	r := ruleOf(t, tokenRule)
	require.NotNil(t, r.Settle())
	assert.True(t, r.ReservesFromBody())
	assert.Equal(t, SettleResponseJSON, r.Settle().Source)
	assert.Equal(t, []string{"usage", "total_tokens"}, r.Settle().Path)
	assert.False(t, r.Settle().KeepOnError)
	assert.False(t, r.Settle().KeepOnMissing, "an answer without usage is charged max by default")
	assert.Equal(t, int64(4000), r.MissingCost(10))
	assert.Equal(t, defaultMaxBody, r.MaxBody())
	cost, err := r.Cost(&fakeRequest{})
	require.NoError(t, err)
	assert.Equal(t, int64(500), cost, "before the body arrives the default is the reservation")

	b := ruleOf(t, `{"name": "b", "limits": [{"rate": "1000000/m"}], "cost": {"request_bytes": true, "max": 100000}}`)
	assert.True(t, b.countsBytes())
	assert.Equal(t, BytesRequest, b.Settle().Bytes, "request bytes settle to the bytes that passed")
	cost, err = b.Cost(&fakeRequest{headers: map[string]string{"content-length": "2048"}})
	require.NoError(t, err)
	assert.Equal(t, int64(2048), cost, "content-length is the reservation")
}

func TestTheReservationFromARequestBodyIsBoundedAndNeverVanishes(t *testing.T) {
	r := ruleOf(t, tokenRule)
	tests := []struct {
		name     string
		body     string
		complete bool
		want     int64
		err      bool
	}{
		{"max_tokens is reserved", `{"model": "m", "messages": [{"x": {"max_tokens": 9}}], "max_tokens": 300}`, true, 300, false},
		{"max_tokens above max reserves max", `{"max_tokens": 999999}`, true, 4000, false},
		{"max_tokens given twice reserves the higher", `{"max_tokens": 1, "max_tokens": 3000}`, true, 3000, false},
		{"max_tokens 0 reserves the default", `{"max_tokens": 0}`, true, 500, true},
		{"a negative max_tokens reserves the default", `{"max_tokens": -5}`, true, 500, true},
		{"a fractional max_tokens reserves the default", `{"max_tokens": 1.5}`, true, 500, true},
		{"a string max_tokens reserves the default", `{"max_tokens": "300"}`, true, 500, true},
		{"a body without max_tokens reserves the default", `{"model": "m"}`, true, 500, true},
		{"a malformed body reserves the default", `{"max_tokens": 3`, true, 500, true},
		{"a body that is not an object reserves the default", `[1, 2]`, true, 500, true},
		{"a body past max_body reserves the default", `{"max_tokens": 1}`, false, 500, true},
		{"a client writing max_tokens as 1e3 reserves 1000", `{"max_tokens": 1e3}`, true, 1000, true},
		{"a client writing max_tokens as 3000.0 reserves 3000", `{"max_tokens": 3000.0}`, true, 3000, true},
		{"a client writing max_tokens as 2999.5 reserves 3000", `{"max_tokens": 2999.5}`, true, 3000, true},
		{"a client writing max_tokens as a string reserves its number", `{"max_tokens": " 3_000 "}`, true, 3000, true},
		{"a client writing max_tokens too large for an int64 reserves max", `{"max_tokens": 100000000000000000000000}`, true, 4000, true},
		{"a client writing max_tokens as 1e400 reserves max", `{"max_tokens": 1e400}`, true, 4000, true},
		{"a client hiding max_tokens behind a null copy reserves the other", `{"max_tokens": 3000, "max_tokens": null}`, true, 3000, true},
		{"a client escaping the member name reserves max_tokens", `{"max\u005ftokens": 3000}`, true, 3000, false},
		{"a client writing the member name in upper case reserves it", `{"max_tokens": 1, "MAX_TOKENS": 3000}`, true, 3000, false},
		{"a client starting its body with a byte order mark reserves max_tokens", "\ufeff{\"max_tokens\": 3000}", true, 3000, false},
		{"a client sending its body in UTF-16LE reserves max_tokens", utf16LE(`{"max_tokens": 3000}`), true, 3000, false},
		{"a client sending its body in UTF-16BE with a byte order mark reserves max_tokens", "\xfe\xff" + utf16BE(`{"max_tokens": 3000}`), true, 3000, false},
		{"a client sending its body in UTF-32LE reserves max_tokens", utf32LE(`{"max_tokens": 3000}`), true, 3000, false},
		{"max_tokens inside a string is not max_tokens", `{"prompt": "\"max_tokens\": 3000", "max_tokens": 10}`, true, 10, false},
		{"max_tokens of a nested object is not the request's", `{"max_tokens": 10, "tools": {"max_tokens": 3000}}`, true, 10, false},
		{"a body with a comment is not JSON", `{"max_tokens": 3000 /* x */}`, true, 500, true},
		{"a client adding NaN elsewhere (Python reads it) still reserves max_tokens", `{"temperature": NaN, "top_p": -Infinity, "max_tokens": 3000}`, true, 3000, false},
		{"max_tokens Infinity reserves max", `{"max_tokens": Infinity}`, true, 4000, true},
		{"max_tokens NaN reserves the default", `{"max_tokens": NaN}`, true, 500, true},
		{"NaN inside a string is text", `{"x": "NaN\" Infinity", "max_tokens": 3000}`, true, 3000, false},
		{"a body nested deeper than the reader goes reserves max", `{"x": ` + strings.Repeat("[", 100000) + strings.Repeat("]", 100000) + `, "max_tokens": 3000}`, true, 4000, true},
		{"brackets inside strings are not nesting", `{"x": "` + strings.Repeat("[", 20000) + `\"` + `", "max_tokens": 3000}`, true, 3000, false},
		{"a body that is not JSON and not deep reserves the default", `{"x": [[[}`, true, 500, true},
		{"a body nested 5000 deep around another member is read", `{"x": ` + strings.Repeat("[", 5000) + strings.Repeat("]", 5000) + `, "max_tokens": 3000}`, true, 3000, false},
		{"a client hiding max_tokens 0 behind a copy of 1 reserves the default", `{"max_tokens": 0, "Max_Tokens": 1}`, true, 500, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := r.BodyCost([]byte(tt.body), tt.complete)
			assert.Equal(t, tt.want, got)
			assert.Equal(t, tt.err, err != nil, "%v", err)
		})
	}
}

func utf16LE(s string) string {
	var b []byte
	for _, c := range []byte(s) {
		b = append(b, c, 0)
	}
	return string(b)
}

func utf16BE(s string) string {
	var b []byte
	for _, c := range []byte(s) {
		b = append(b, 0, c)
	}
	return string(b)
}

func utf32LE(s string) string {
	var b []byte
	for _, c := range []byte(s) {
		b = append(b, c, 0, 0, 0)
	}
	return string(b)
}

func TestSettleConfigErrorsNameTheirField(t *testing.T) {
	tests := []struct {
		name, rule, path, msg string
	}{
		{"two reservation sources", `"cost": {"header": "x", "request_bytes": true}`, "rules[0].cost", "exclude each other"},
		{"a settle without a source", `"cost": {"settle": {}}`, "rules[0].cost.settle", "exactly one"},
		{"a settle with two sources", `"cost": {"settle": {"response_header": "x", "body_bytes": "both"}}`, "rules[0].cost.settle", "exactly one"},
		{"an unknown body_bytes", `"cost": {"settle": {"body_bytes": "all"}}`, "rules[0].cost.settle.body_bytes", "unknown value"},
		{"an unknown on_error", `"cost": {"settle": {"body_bytes": "both", "on_error": "charge"}}`, "rules[0].cost.settle.on_error", "unknown value"},
		{"prompt_bytes without request_json", `"cost": {"header": "x", "prompt_bytes": 4}`, "rules[0].cost.prompt_bytes", "only with request_json"},
		{"prompt_bytes out of range", `"cost": {"request_json": "max_tokens", "prompt_bytes": 0}`, "rules[0].cost.prompt_bytes", "out of range"},
		{"an unknown on_missing", `"cost": {"settle": {"body_bytes": "both", "on_missing": "nothing"}}`, "rules[0].cost.settle.on_missing", "unknown value"},
		{"an empty path segment", `"cost": {"request_json": "a..b"}`, "rules[0].cost.request_json", "dotted path"},
		{"max_body too large", `"cost": {"request_json": "a", "max_body": 2000000}`, "rules[0].cost.max_body", "out of range"},
		{"settle and count_on together (count_on.go refuses it)", `"cost": {"settle": {"body_bytes": "both"}}, "count_on": {"status": ["401"]}`, "rules[0].count_on", "reserves and settles"},
		{"a sliding window cannot settle", `"limits": [{"rate": "10/s", "algorithm": "sliding_window"}], "cost": {"settle": {"body_bytes": "both"}}`, "rules[0].cost", "sliding_window"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rule := `{"name": "r", ` + tt.rule + `}`
			if !strings.Contains(tt.rule, `"limits"`) {
				rule = `{"name": "r", "limits": [{"rate": "10/s"}], ` + tt.rule + `}`
			}
			_, err := ParseConfig([]byte(`{"rules": [` + rule + `]}`))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.path)
			assert.Contains(t, err.Error(), tt.msg)
		})
	}
}

// Every scope settles, and a global rule may reserve from the request body; a lease is refused,
// naming the field.
func TestEveryScopeSettlesAndReservesFromTheBodyButALeaseIsRefused(t *testing.T) {
	const global = `{"global": {"cluster": "outbound|8081||rls.default.svc.cluster.local"}, "rules": [{"name": "r", "limits": [{"rate": "10/s"}], `
	for _, tt := range []struct{ name, rule string }{
		{"a global rule reserving from a header", `"scope": "global", "cost": {"header": "x-estimate", "default": 5, "settle": {"response_json": "usage.total_tokens"}}`},
		{"a global rule reserving from the request body", `"scope": "global", "cost": {"request_json": "max_tokens", "default": 5, "settle": {"response_json": "usage.total_tokens"}}`},
		{"a global rule reserving the request bytes", `"scope": "global", "cost": {"request_bytes": true}`},
		{"a rule of both scopes", `"scope": "both", "cost": {"settle": {"body_bytes": "response"}}`},
		{"a rule of both scopes reserving from the request body", `"scope": "both", "cost": {"request_json": "max_tokens", "default": 5, "settle": {"response_json": "usage.total_tokens"}}`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := ParseConfig([]byte(global + tt.rule + `}]}`))
			require.NoError(t, err)
			assert.NotNil(t, cfg.Rules()[0].Settle())
		})
	}
	_, err := ParseConfig([]byte(global + `"scope": "global", "lease": {"batch": 5}, "cost": {"settle": {"body_bytes": "response"}}}]}`))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "rules[0].cost")
	assert.Contains(t, err.Error(), "cannot use a global lease")
}

func TestAByteCostAdvertisesItsQuotaUnitAsContentBytes(t *testing.T) {
	c := mustParse(t, `{"rules": [{"name": "up", "limits": [{"rate": "1000/s"}], "cost": {"request_bytes": true}},
		{"name": "calls", "limits": [{"rate": "10/s"}]}]}`)
	var outcomes []Outcome
	for _, r := range c.Rules() {
		l := &r.LimitSets()[0].Limits[0]
		outcomes = append(outcomes, Outcome{Limit: l, Decision: algorithms.Decision{Allowed: true, Limit: l.Limit.Quota, Remaining: 1}})
	}
	fields, _ := c.Response.AppendAllowed(nil, nil, outcomes, 0)
	var policy string
	for _, f := range fields {
		if f.Name == HeaderRateLimitPolicy {
			policy = string(f.Value)
		}
	}
	assert.Equal(t, `"up";q=1000;w=1;qu="content-bytes", "calls";q=10;w=1;qu="requests"`, policy)
}

// FuzzABodyCostNeverFallsWhenACopyIsAdded: whatever a client adds as a second copy of the field (in
// any case), the reservation never falls below what the first copy alone reserves.
func FuzzABodyCostNeverFallsWhenACopyIsAdded(f *testing.F) {
	f.Add("1000", "1")
	f.Add("1e3", `"x"`)
	f.Add(`"1000"`, "0")
	f.Add("999.5", "null")
	f.Add("5", "-7")
	r := fuzzTokenRule(f)
	f.Fuzz(func(t *testing.T, a, b string) {
		one := []byte(`{"max_tokens": ` + a + `}`)
		two := []byte(`{"max_tokens": ` + a + `, "Max_Tokens": ` + b + `}`)
		c1, _ := r.BodyCost(one, true)
		c2, err2 := r.BodyCost(two, true)
		if errors.Is(err2, body.ErrNotJSON) {
			return
		}
		assert.GreaterOrEqual(t, c2, c1, "%s then %s", a, b)
	})
}

func fuzzTokenRule(f *testing.F) *Rule {
	cfg, err := ParseConfig([]byte(`{"rules": [` + tokenRule + `]}`))
	require.NoError(f, err)
	return cfg.Rules()[0]
}

func TestSettleMemoryDefaultsTo32MiBAndARangeOutsideIsRefusedNamingTheField(t *testing.T) {
	cfg, err := ParseConfig([]byte(`{"rules": [` + tokenRule + `]}`))
	require.NoError(t, err)
	assert.Equal(t, 32<<20, cfg.SettleMemory)
	cfg, err = ParseConfig([]byte(`{"settle_memory": 1048576, "rules": [` + tokenRule + `]}`))
	require.NoError(t, err)
	assert.Equal(t, 1<<20, cfg.SettleMemory)
	for _, v := range []string{"1000", "1073741824"} {
		_, err = ParseConfig([]byte(`{"settle_memory": ` + v + `, "rules": [` + tokenRule + `]}`))
		assert.ErrorContains(t, err, "settle_memory: "+v+" out of range", v)
	}
}

func TestAPromptEstimateAddsAUnitPerPromptBytesOfTheBodyToTheReservation(t *testing.T) {
	r := ruleOf(t, `{"name": "tokens", "key": [{"header": "x-user"}], "limits": [{"rate": "100000/d"}],
		"cost": {"request_json": "max_tokens", "prompt_bytes": 4, "default": 1000, "max": 16000, "max_body": 1024,
		"settle": {"response_json": "usage.total_tokens"}}}`)
	for _, tc := range []struct {
		name     string
		body     string
		complete bool
		want     int64
	}{
		{"max_tokens plus a quarter of the body's bytes, rounded up", `{"max_tokens": 1, "prompt": "` + strings.Repeat("w", 400) + `"}`, true, 1 + 108}, // 431 bytes
		{"a body without max_tokens: the default plus the prompt", `{"prompt": "abc"}`, true, 1000 + 5},                                                 // 17 bytes
		{"a body past max_body: the default plus what was held", strings.Repeat("x", 1024), false, 1000 + 256},
		{"never more than max", `{"max_tokens": 15990, "prompt": "` + strings.Repeat("w", 400) + `"}`, true, 16000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, _ := r.BodyCost([]byte(tc.body), tc.complete)
			assert.Equal(t, tc.want, n)
		})
	}
}
