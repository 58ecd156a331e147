package rlsconfig

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestStrictErrorsNameTheFileLineAndField(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		want       string // the *Error's text
	}{
		{"an unknown field is refused", "domain: d\ndescriptors:\n  - key: k\n    rate_limt:\n      unit: second\n",
			"f.yaml:4:5: descriptors[0].rate_limt: unknown field"},
		{"a field in the wrong place is refused", "domain: d\ndescriptors:\n  - key: k\n    unit: second\n",
			"f.yaml:4:5: descriptors[0].unit: unknown field"},
		{"a bad unit is refused", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: minutes\n      requests_per_unit: 1\n",
			`f.yaml:5:13: descriptors[0].rate_limit.unit: invalid unit "minutes"`},
		{"a missing unit is refused", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      requests_per_unit: 1\n",
			`f.yaml:5:7: descriptors[0].rate_limit.unit: invalid unit ""`},
		{"unlimited with a unit is refused", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unlimited: true\n      unit: second\n",
			"f.yaml:6:13: descriptors[0].rate_limit.unit: must not be set when unlimited is true"},
		{"a duplicate key is refused", "domain: d\ndescriptors:\n  - key: k\n  - key: k\n",
			`f.yaml:4:5: descriptors[1]: duplicate descriptor key "k" value "" (first on line 3)`},
		{"a duplicate key and value in a nested list is refused", "domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - {key: k, value: v}\n      - {key: k, value: v}\n",
			`f.yaml:6:9: descriptors[0].descriptors[1]: duplicate descriptor key "k" value "v" (first on line 5)`},
		{"a duplicate field is refused", "domain: d\ndomain: e\n", "f.yaml:2:1: domain: duplicate field (first on line 1)"},
		{"an empty domain is refused", "domain: \"\"\ndescriptors: []\n", "f.yaml:1:9: domain: required, and must not be empty"},
		{"a missing domain is refused", "descriptors: []\n", "f.yaml:1:1: domain: required, and must not be empty"},
		{"an empty key is refused", "domain: d\ndescriptors:\n  - value: v\n", "f.yaml:3:5: descriptors[0].key: required, and must not be empty"},
		{"a negative requests_per_unit is refused", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: -1}\n",
			"f.yaml:4:51: descriptors[0].rate_limit.requests_per_unit: want an integer between 0 and 4294967295"},
		{"a requests_per_unit above 2^32-1 is refused", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 4294967296}\n",
			"descriptors[0].rate_limit.requests_per_unit: want an integer between 0 and 4294967295"},
		{"a string shadow_mode is refused", "domain: d\ndescriptors:\n  - key: k\n    shadow_mode: yes please\n",
			`f.yaml:4:18: descriptors[0].shadow_mode: want true or false, got str "yes please"`},
		{"a quota_mode that is not a boolean is refused", "domain: d\ndescriptors:\n  - key: k\n    quota_mode: 1\n",
			`f.yaml:4:17: descriptors[0].quota_mode: want true or false, got int "1"`},
		{"share_threshold without a wildcard value is refused", "domain: d\ndescriptors:\n  - key: k\n    value: a\n    share_threshold: true\n",
			`f.yaml:5:22: descriptors[0].share_threshold: only for a wildcard value (one with '*'), got "a"`},
		{"an empty replaces name is refused", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      replaces:\n        - name: \"\"\n",
			"f.yaml:8:11: descriptors[0].rate_limit.replaces[0].name: required, and must not be empty"},
		{"a limit replacing itself is refused", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      name: me\n      unit: second\n      requests_per_unit: 1\n      replaces: [{name: me}]\n",
			`descriptors[0].rate_limit.replaces: must not name this limit itself ("me")`},
		{"an unknown algorithm is refused", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, algorithm: lottery}\n",
			`descriptors[0].rate_limit.algorithm: unknown algorithm "lottery"`},
		{"an algorithm with requests_per_unit 0 is refused", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 0, algorithm: token_bucket}\n",
			"descriptors[0].rate_limit.requests_per_unit: invalid for algorithm token_bucket"},
		{"descriptors that are not a list are refused", "domain: d\ndescriptors: {key: k}\n",
			"f.yaml:2:14: descriptors: want a list of descriptors, got a mapping"},
		{"a second YAML document is refused", "domain: d\n---\ndomain: e\n", "want one YAML document, found more"},
		{"an empty file is refused", "", "f.yaml: empty file"},
		{"broken YAML is refused", "domain: [\n", "f.yaml: yaml: line"},
		{"a merge key is refused as unknown", "domain: d\ndescriptors:\n  - <<: {key: k}\n", "descriptors[0].<<: unknown field"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Load([]File{{Name: "f.yaml", Data: []byte(tc.yaml)}})
			require.Error(t, err)
			assert.Nil(t, c)
			assert.Contains(t, err.Error(), tc.want)
			var e *Error
			assert.True(t, errors.As(err, &e), "an *Error")
		})
	}
}

func TestADuplicateDomainAcrossFilesIsRefusedNamingBothFiles(t *testing.T) {
	_, err := Load([]File{{"a.yaml", []byte("domain: d\n")}, {"b.yaml", []byte("domain: d\n")}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `b.yaml:1:9: domain: duplicate domain "d" (also in a.yaml)`)
}

func TestEveryBadFileIsReportedAndNothingIsLoaded(t *testing.T) {
	_, err := Load([]File{{"a.yaml", []byte("domain: a\nx: 1\n")}, {"b.yaml", []byte("domain: b\n")}, {"c.yaml", []byte("domain: c\ny: 1\n")}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "a.yaml:2:1: x: unknown field")
	assert.Contains(t, err.Error(), "c.yaml:2:1: y: unknown field")
}

func TestAnAliasBombIsRefused(t *testing.T) {
	// Each list holds 8 descriptors with distinct keys whose children alias the list below:
	// valid at every level, and 8^9 descriptors once expanded.
	lists := func(first string) string {
		var b strings.Builder
		fmt.Fprintf(&b, "- %s &a0 [{key: k1}, {key: k2}, {key: k3}, {key: k4}, {key: k5}, {key: k6}, {key: k7}, {key: k8}]\n", first)
		for i := 1; i < 9; i++ {
			fmt.Fprintf(&b, "- %s &a%d [", strings.ReplaceAll(first, "0", strconv.Itoa(i)), i)
			for j := 1; j <= 8; j++ {
				if j > 1 {
					b.WriteString(", ")
				}
				fmt.Fprintf(&b, "{key: k%d, descriptors: *a%d}", j, i-1)
			}
			b.WriteString("]\n")
		}
		return b.String()
	}
	t.Run("in descriptors, the node budget refuses it", func(t *testing.T) {
		bomb := "domain: d\ndescriptors:\n" + indent(strings.ReplaceAll(lists("{key: d0, descriptors:"), "]\n", "]}\n"), "  ")
		_, err := Load([]File{{"bomb.yaml", []byte(bomb)}})
		require.Error(t, err)
		assert.Contains(t, err.Error(), "too many YAML nodes")
	})
	t.Run("in metadata, the bound on its values refuses it", func(t *testing.T) {
		bomb := "domain: d\ndescriptors:\n  - key: k\n    metadata:\n      l:\n" + indent(lists(""), "        ")
		_, err := Load([]File{{"bomb.yaml", []byte(bomb)}})
		require.Error(t, err)
		assert.Contains(t, err.Error(), "metadata of more than 4096 values")
	})
}

func indent(s, pre string) string {
	lines := strings.Split(strings.TrimSuffix(s, "\n"), "\n")
	for i := range lines {
		lines[i] = pre + lines[i]
	}
	return strings.Join(lines, "\n") + "\n"
}

func TestNumbersAndBooleansAreReadAsWrittenForStrings(t *testing.T) {
	c, err := Load([]File{{"n.yaml", []byte("domain: 42\ndescriptors:\n  - key: port\n    value: 8080\n    rate_limit: {unit: second, requests_per_unit: 1}\n")}})
	require.NoError(t, err)
	r, ok := match(c, "42", entries("port", "8080"))
	require.True(t, ok)
	assert.Equal(t, uint32(1), r.Limit.RequestsPerUnit)
}
