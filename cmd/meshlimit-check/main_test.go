package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// check runs the command on args and returns its exit code, standard output and error.
func check(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(args, strings.NewReader(stdin), &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestAFileWithFiveErrorsOfDifferentKindsPrintsAllFiveInOneRun(t *testing.T) {
	code, out, _ := check(t, "", "testdata/five-errors.yaml")
	assert.Equal(t, 1, code)
	const f = "testdata/five-errors.yaml"
	assert.Equal(t, f+":15: pluginConfig of WasmPlugin shop/meshlimit: 5 errors\n"+
		f+":20: rules[0].limits[0].burst: want an integer, got a string\n"+
		f+`:21: rules[0].failure_mod: unknown field (known fields: cache_denials, cost, count_on, enforce_percent, failure_mode, fallback, key, lease, limits, match, max_keys, messages, missing_key, name, overflow, overrides, scope, shadow, shadow_header); did you mean "failure_mode"?`+"\n"+
		f+`:24: rules[1].limits[0].rate: invalid rate "100/fortnight": unknown unit "fortnight" (want s, m, h, d, day, week, month, year, or a duration such as "30s")`+"\n"+
		f+":25: rules[1].fallback: only rules with scope global or both have a fallback\n"+
		f+`:27: rules[2].name: "search-per-ip" is already the name of rules[0]`+"\n", out)
}

func TestTheShippedWasmPluginPrintsItsSummary(t *testing.T) {
	code, out, errOut := check(t, "", "../../envoy/istio/wasmplugin.yaml")
	require.Equal(t, 0, code, out+errOut)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.NotEmpty(t, lines)
	assert.Regexp(t, `^\.\./\.\./envoy/istio/wasmplugin\.yaml:\d+: pluginConfig of WasmPlugin istio-system/meshlimit: valid$`, lines[0])
	assert.Contains(t, out, "  2 rules; denials answer 429; quota headers ietf; decision service: cluster outbound|8081||meshlimit.meshlimit.svc.cluster.local")
	assert.Contains(t, out, "  rule search-per-ip (local): requests with routes search\n    key client_ip(trusted_hops 1, ipv6_mask 64)\n    limits search-per-ip: 10/s token_bucket burst 20\n")
	assert.Contains(t, out, "  rule orders-per-key (global): requests with routes orders\n    key header x-api-key\n    limits orders-per-key: 100/m token_bucket\n")

	code, out, _ = check(t, "", "-q", "../../envoy/istio/wasmplugin.yaml")
	assert.Equal(t, 0, code)
	assert.Equal(t, 1, strings.Count(out, "\n"), "-q prints only the verdict: %s", out)
}

func TestAPluginConfigInYAMLIsCheckedAndSummarized(t *testing.T) {
	code, out, _ := check(t, "", "testdata/plugin.yaml")
	require.Equal(t, 0, code, out)
	for _, want := range []string{
		"testdata/plugin.yaml:2: the document: valid",
		"rule login (local): requests with path exact /login and methods POST",
		"counts only responses with status 401, then blocks the key for 15m",
		"rule tokens (local, shadow: counts, never denies): every request",
		"cost reserved from request body field max_tokens, settled from response body field usage.total_tokens",
		"rule per-key (global): every request",
		"limits gpu: 20 in flight (concurrency)",
		"shed: every request; capacity 500 in flight; classes critical > default > sheddable",
	} {
		assert.Contains(t, out, want)
	}
}

func TestAnEnvoyConfigurationInAStringValueIsChecked(t *testing.T) {
	code, out, _ := check(t, "", "testdata/envoy.json")
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, `testdata/envoy.json:16: configuration of Envoy wasm filter "meshlimit": valid`)
	assert.Contains(t, out, "limits per-ip: 5/s token_bucket burst 10")

	// The shipped bootstrap is YAML with the JSON in a literal block: an error in it is placed
	// on its own line of the file.
	data, err := os.ReadFile("../../envoy/envoy.yaml")
	require.NoError(t, err)
	broken := strings.Replace(string(data), `"limits": [{"rate": "100/m"}]`, `"limits": [{"rate": "100/m", "burst": "x"}]`, 1)
	require.NotEqual(t, string(data), broken)
	line := 1 + strings.Count(broken[:strings.Index(broken, `"burst": "x"`)], "\n")
	code, out, _ = check(t, broken, "-")
	assert.Equal(t, 1, code)
	assert.Contains(t, out, "<stdin>:"+itoa(line)+": rules[1].limits[0].burst: want an integer, got a string\n")
}

func TestAJSONPluginConfigReportsItsErrorsWithLines(t *testing.T) {
	code, out, _ := check(t, "{\n  \"rules\": [\n    {\"name\": \"a\", \"limits\": [{\"rate\": 5}]}\n  ],\n  \"enforce\": true,\n  \"enforce\": false\n}\n", "-")
	assert.Equal(t, 1, code)
	assert.Equal(t, "<stdin>:1: the document: 2 errors\n"+
		"<stdin>:3: rules[0].limits[0].rate: want a string, got a number\n"+
		"<stdin>:5: enforce: duplicate field\n", out) // the line of its first copy

	code, out, _ = check(t, "{\"rules\": [", "-")
	assert.Equal(t, 1, code)
	assert.Contains(t, out, "<stdin>:1: invalid JSON")
}

func TestAFileWithoutAConfigurationFails(t *testing.T) {
	code, out, _ := check(t, "apiVersion: v1\nkind: Namespace\nmetadata: {name: x}\n", "-")
	assert.Equal(t, 1, code)
	assert.Contains(t, out, "<stdin>: no meshlimit configuration found")

	code, out, _ = check(t, "a: [\n", "-")
	assert.Equal(t, 1, code)
	assert.Contains(t, out, "<stdin>: yaml: line")
}

func TestAWasmPluginWithoutPluginConfigIsRefusedAsTheFilterWould(t *testing.T) {
	code, out, _ := check(t, "kind: WasmPlugin\nmetadata: {name: m}\nspec: {url: oci://x}\n", "-")
	assert.Equal(t, 1, code)
	assert.Contains(t, out, "<stdin>:1: pluginConfig of WasmPlugin m: 1 error\n<stdin>:1: empty configuration")
}

func TestBadUsageExitsTwo(t *testing.T) {
	code, _, errOut := check(t, "")
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, "usage: meshlimit-check")
	code, _, errOut = check(t, "", filepath.Join(t.TempDir(), "missing.yaml"))
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, "no such file")
}

func itoa(n int) string {
	var b []byte
	for ; n > 0; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	return string(b)
}
