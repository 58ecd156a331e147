package rules

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestAnErrorQuotesAtMostABoundedPrefixOfTheInputItEchoes(t *testing.T) {
	long := strings.Repeat("x", 8<<20)
	rule := func(fields string) string {
		return `{"rules":[{"name":"r","key":["client_ip"],"limits":[{"rate":"1/s"}]` + fields + `}]}`
	}
	for _, tc := range []struct {
		name, doc, want string
	}{
		{"an 8 MB rule name", `{"rules":[{"name":"` + long + `","limits":[{"rate":"1/s"}]}]}`, `"` + long[:maxEcho] + `"... (8388608 bytes)`},
		{"an 8 MB unknown field", rule(`,"` + long + `":1`), `rules[0].` + long[:maxEcho] + `... (8388608 bytes): unknown field`},
		{"an 8 MB duplicate field", `{"rules":[],"` + long + `":1,"` + long + `":2}`, long[:maxEcho] + `... (8388608 bytes): duplicate field`},
		{"an 8 MB header name in a map", `{"rules":[{"name":"r","limits":[{"rate":"1/s"}]}],"response":{"headers":{"` + long + `":"v"}}}`, `response.headers["` + long[:maxEcho] + `"... (8388608 bytes)]: name longer than 8192 bytes`},
		{"an 8000-byte header name that is not a token", `{"rules":[{"name":"r","limits":[{"rate":"1/s"}]}],"response":{"headers":{"a b` + long[:8000] + `":"v"}}}`,
			`"a b` + long[:maxEcho-3] + `"... (8003 bytes) is not a valid header name`},
		{"an 8 MB rate", rule(`,"overrides":[{"value":"10.0.0.1","limits":[{"rate":"` + long + `"}]}]`), `invalid rate "` + long[:maxEcho] + `"... (8388608 bytes)`},
		{"an 8 MB number", rule(`,"cost":` + strings.Repeat("9", 8<<20)), `got ` + strings.Repeat("9", maxEcho) + `... (8388608 bytes) (out of range)`},
		{"an 8 MB override value given twice", `{"rules":[{"name":"r","key":[{"header":"x"}],"limits":[{"rate":"1/s"}],"overrides":[{"value":"` + long + `","unlimited":true},{"value":"` + long + `","unlimited":true}]}]}`,
			`"` + long[:maxEcho] + `"... (8388608 bytes) is overridden twice`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseConfig([]byte(tc.doc))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			assert.Less(t, len(err.Error()), 4096, "the error is a few lines, whatever the input's size")
		})
	}
}

func TestQuoteInputQuotesAShortValueWholeAndALongOneAtACharacterBoundary(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"a short value is quoted as %q does", "a\"b", `"a\"b"`},
		{"a value of maxEcho bytes is quoted whole", strings.Repeat("y", maxEcho), `"` + strings.Repeat("y", maxEcho) + `"`},
		{"a longer one is cut with its length", strings.Repeat("y", maxEcho+1), `"` + strings.Repeat("y", maxEcho) + `"... (65 bytes)`},
		{"a cut never splits a character", strings.Repeat("y", maxEcho-1) + "é" + "z", `"` + strings.Repeat("y", maxEcho-1) + `"... (66 bytes)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, quoteInput(tc.in))
		})
	}
}

func TestAnIntegerFieldTakesANumberOnlyWhenItIsAnIntegerAsWritten(t *testing.T) {
	doc := func(field string) string {
		return `{"rules":[{"name":"r","key":["client_ip"],"limits":[{"rate":"1/s"}],` + field + `}]}`
	}
	for _, tc := range []struct {
		name, field, err string
		percent, cost    int
	}{
		{"a cost past int64 is out of range", `"cost": 9223372036854775808`, `rules[0].cost: want an integer, got 9223372036854775808 (out of range)`, 0, 0},
		{"a cost below int64 is out of range", `"cost": -9223372036854775809`, `rules[0].cost: want an integer, got -9223372036854775809 (out of range)`, 0, 0},
		{"a cost past a float64 is out of range", `"cost": 1e400`, `rules[0].cost: want an integer, got 1e400 (out of range)`, 0, 0},
		{"an exponent past any integer is out of range", `"cost": 1e999999999999999999999`, `rules[0].cost: want an integer, got 1e999999999999999999999 (out of range)`, 0, 0},
		{"a number a float64 rounds to 0 is not an integer", `"cost": 1e-996`, `rules[0].cost: want an integer, got 1e-996`, 0, 0},
		{"a percentage a float64 rounds to 100 is not an integer", `"enforce_percent": 99.99999999999999999`, `rules[0].enforce_percent: want an integer, got 99.99999999999999999`, 0, 0},
		{"a percentage with a fraction is not an integer", `"enforce_percent": 50.5`, `rules[0].enforce_percent: want an integer, got 50.5`, 0, 0},
		{"an integer written with a zero fraction is one", `"enforce_percent": 100.0`, ``, 100, 1},
		{"an integer written with an exponent is one", `"enforce_percent": 1e1, "cost": 2E+2`, ``, 10, 200},
		{"an integer written as a fraction and an exponent is one", `"enforce_percent": 1.5e1, "cost": 50e-1`, ``, 15, 5},
		{"zero is an integer whatever its exponent", `"enforce_percent": 0e-999`, ``, 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ParseConfig([]byte(doc(tc.field)))
			if tc.err != "" {
				require.Error(t, err)
				assert.Equal(t, "config: "+tc.err, err.Error())
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.percent, c.rules[0].EnforcePercent)
			assert.Equal(t, int64(tc.cost), c.rules[0].cost.constant)
		})
	}
}
