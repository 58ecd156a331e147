package rules

import (
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// errorLines returns the "path: msg" of each error of ParseConfig(doc), sorted.
func errorLines(t *testing.T, doc string) []string {
	t.Helper()
	c, err := ParseConfig([]byte(doc))
	require.Error(t, err)
	assert.Nil(t, c)
	var lines []string
	for _, fe := range fieldErrors(t, err) {
		lines = append(lines, fe.Path+": "+fe.Msg)
	}
	sort.Strings(lines)
	return lines
}

func TestParseConfigReportsShapeAndCompileErrorsInOnePass(t *testing.T) {
	lines := errorLines(t, `{
		"response": {"status": "429", "body_format": "html"},
		"log_levl": "debug",
		"rules": [
			{"name": "a", "shadow": "yes", "limits": [{"rate": "5/fortnight"}]},
			{"name": 7, "limits": [{"rate": "1/s", "algorithm": "nope"}]}
		]}`)
	assert.Equal(t, []string{
		`log_levl: unknown field (known fields: enforce, global, log_level, max_keys, response, rules, settle_memory, shed, shedders); did you mean "log_level"?`,
		`response.body_format: unknown format "html" (want text or problem_json)`,
		`response.status: want an integer, got a string`,
		`rules[0].limits[0].rate: invalid rate "5/fortnight": unknown unit "fortnight" (want s, m, h, d, day, week, month, year, or a duration such as "30s")`,
		`rules[0].shadow: want true or false, got a string`,
		`rules[1].limits[0].algorithm: unknown algorithm "nope" (want token_bucket, leaky_bucket, fixed_window, sliding_log or sliding_window)`,
		`rules[1].name: want a string, got a number`,
	}, lines)
}

func TestAFieldOfTheWrongShapeCausesNoFollowOnErrors(t *testing.T) {
	const limits = `"limits": [{"rate": "10/s"}]`
	tests := []struct {
		name, doc, want string
	}{
		{"a rate that is a number is not also missing",
			`{"rules": [{"name": "a", "limits": [{"rate": 10}]}]}`,
			"rules[0].limits[0].rate: want a string, got a number"},
		{"limits that are a string are not also empty",
			`{"rules": [{"name": "a", "limits": "10/s"}]}`,
			"rules[0].limits: want an array, got a string"},
		{"a limit that is a string keeps the index and is not also missing its rate",
			`{"rules": [{"name": "a", "limits": ["10/s"]}]}`,
			"rules[0].limits[0]: want an object, got a string"},
		{"rules that are an object are not also missing",
			`{"rules": {"name": "a"}}`,
			"rules: want an array, got an object"},
		{"a document that is an array is one error",
			`[{"rules": []}]`,
			": want an object, got an array"},
		{"a scope that is a number does not make the fallback a local rule's",
			`{"global": {"cluster": "c", "authority": "a"}, "rules": [{"name": "a", "scope": 1, "fallback": [{"rate": "1/s"}], ` + limits + `}]}`,
			"rules[0].scope: want a string, got a number"},
		{"a global that is a string does not leave the global rules without one",
			`{"global": "outbound|8081||svc", "rules": [{"name": "a", "scope": "global", ` + limits + `}]}`,
			"global: want an object, got a string"},
		{"a key that is a string does not leave the overrides without a key",
			`{"rules": [{"name": "a", "key": "client_ip", "overrides": [{"value": "10.0.0.1", "unlimited": true}], ` + limits + `}]}`,
			"rules[0].key: want an array, got a string"},
		{"a misspelt field is not also missing under its right name",
			`{"rules": [{"name": "a", "limits": [{"rates": "10/s"}]}]}`,
			`rules[0].limits[0].rates: unknown field (known fields: algorithm, burst, calendar_offset, concurrency, name, rate); did you mean "rate"?`},
		{"a partition_key that is a string does not make its secret stray",
			`{"response": {"partition_key": "yes", "partition_key_secret": "0123456789abcdef"}, "rules": [{"name": "a", ` + limits + `}]}`,
			"response.partition_key: want true or false, got a string"},
		{"a lease that is a number is not also a lease without a batch",
			`{"global": {"cluster": "c", "authority": "a"}, "rules": [{"name": "a", "scope": "global", "lease": 10, ` + limits + `}]}`,
			"rules[0].lease: want an object, got a number"},
		{"a path match whose prefix is a number is not also a match of no kind",
			`{"rules": [{"name": "a", "match": {"path": {"prefix": 1}}, ` + limits + `}]}`,
			"rules[0].match.path.prefix: want a string, got a number"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, []string{tc.want}, errorLines(t, tc.doc))
		})
	}
}

func TestACompileErrorBesideAFieldOfTheWrongShapeIsStillReported(t *testing.T) {
	lines := errorLines(t, `{"rules": [
		"not a rule",
		{"name": "b", "scope": 1, "limits": [{"rate": "0/s"}], "shadow_header": "bad header"}
	]}`)
	assert.Equal(t, []string{
		"rules[0]: want an object, got a string",
		`rules[1].limits[0].rate: invalid rate "0/s": quota must be a positive integer`,
		`rules[1].scope: want a string, got a number`,
		`rules[1].shadow_header: "bad header" is not a valid header name`,
	}, lines)
}

func TestParseConfigReportsAtMostMaxErrorsOfBothKinds(t *testing.T) {
	var rs []string
	for i := range 20 {
		rs = append(rs, fmt.Sprintf(`{"name": "r%d", "shadow": 1, "limits": [{"rate": "x"}]}`, i))
	}
	lines := errorLines(t, `{"rules": [`+strings.Join(rs, ",")+`]}`)
	assert.Len(t, lines, maxErrors)
	var shape, compile int
	for _, l := range lines {
		if strings.Contains(l, "want true or false") {
			shape++
		} else {
			compile++
		}
	}
	assert.Equal(t, 20, shape, "every shape error comes first")
	assert.Equal(t, maxErrors-20, compile)
}

func TestAConfigurationWithOnlyShapeErrorsStillDecodesTheRest(t *testing.T) {
	// The rest of the document compiles: a wrong shape in one rule does not hide that the
	// configuration is otherwise valid, and no error is invented for the valid parts.
	lines := errorLines(t, `{"enforce": "yes", "rules": [{"name": "a", "limits": [{"rate": "10/s"}]}, {"name": "a", "limits": [{"rate": "1/s"}]}]}`)
	assert.Equal(t, []string{
		"enforce: want true or false, got a string",
		`rules[1].name: "a" is already the name of rules[0]`,
	}, lines)
}
