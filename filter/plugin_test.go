// The SDK's proxytest emulator exists only without the tinygo tag (natively).
//go:build !tinygo

package filter

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/proxytest"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

// These tests drive the plugin natively through the SDK's proxytest emulator: one host per process,
// so they cannot run in parallel, and its shared data differs from Envoy's on cas 0 (see
// docs/envoy-host.md §8). The compiled module is tested on the Envoy-like host in e2e/.

func emulate(t *testing.T, config string) (proxytest.HostEmulator, types.OnPluginStartStatus) {
	t.Helper()
	opt := proxytest.NewEmulatorOption().
		WithVMContext(NewVMContext()).
		WithPluginConfiguration([]byte(config)).
		WithProperty([]string{"plugin_name"}, []byte("test.meshlimit")).
		WithProperty([]string{"source", "address"}, []byte("192.0.2.10:5555"))
	host, reset := proxytest.NewHostEmulator(opt)
	t.Cleanup(reset)
	return host, host.StartPlugin()
}

func request(path string, extra ...[2]string) [][2]string {
	return append([][2]string{{":method", "GET"}, {":path", path}, {":authority", "a.example"}}, extra...)
}

func TestPluginStartFailsOnABadConfigurationAndSaysWhichField(t *testing.T) {
	host, status := emulate(t, `{"rules":[{"name":"r","limits":[{"rate":"10/parsec"}]}]}`)
	assert.Equal(t, types.OnPluginStartStatusFailed, status)
	logs := host.GetCriticalLogs()
	require.Len(t, logs, 1)
	assert.Contains(t, logs[0], `rules[0].limits[0].rate: invalid rate "10/parsec"`)
	n, err := host.GetCounterMetric("meshlimit.config_errors")
	require.NoError(t, err)
	assert.Equal(t, uint64(1), n)
}

func TestPluginAnswersTheThirdRequestOfABurstOfTwoWithA429(t *testing.T) {
	host, status := emulate(t, `{"rules":[{"name":"per-ip","key":["client_ip"],"limits":[{"rate":"2/h"}]}]}`)
	require.Equal(t, types.OnPluginStartStatusOK, status)
	for i := range 2 {
		id := host.InitializeHttpContext()
		assert.Equal(t, types.ActionContinue, host.CallOnRequestHeaders(id, request("/"), true), "request %d", i+1)
		host.CallOnResponseHeaders(id, [][2]string{{":status", "200"}}, true)
		rl, ok := pairValue(host.GetCurrentResponseHeaders(id), "ratelimit")
		assert.True(t, ok, "the quota fields are added to the response")
		assert.Contains(t, rl, `"per-ip";r=`)
		host.CompleteHttpContext(id)
	}
	id := host.InitializeHttpContext()
	assert.Equal(t, types.ActionPause, host.CallOnRequestHeaders(id, request("/"), true))
	reply := host.GetSentLocalResponse(id)
	require.NotNil(t, reply)
	assert.Equal(t, uint32(429), reply.StatusCode)
	retry, _ := pairValue(reply.Headers, "retry-after")
	assert.Equal(t, "1800", retry, "one of 2/h comes back in half an hour")
	host.Tick() // the counters kept in the guest reach the host on the tick
	n, _ := host.GetCounterMetric("meshlimit.rule.per-ip.limited")
	assert.Equal(t, uint64(1), n)
}

func TestPluginTagsTheUpstreamRequestOfAShadowDenial(t *testing.T) {
	host, status := emulate(t, `{"enforce":false,"rules":[{"name":"dark","limits":[{"rate":"1/h"}],"shadow_header":"x-would-limit"}]}`)
	require.Equal(t, types.OnPluginStartStatusOK, status)
	first := host.InitializeHttpContext()
	host.CallOnRequestHeaders(first, request("/"), true)
	_, tagged := pairValue(host.GetCurrentRequestHeaders(first), "x-would-limit")
	assert.False(t, tagged)
	second := host.InitializeHttpContext()
	assert.Equal(t, types.ActionContinue, host.CallOnRequestHeaders(second, request("/"), true), "enforce=false never denies")
	v, tagged := pairValue(host.GetCurrentRequestHeaders(second), "x-would-limit")
	assert.True(t, tagged)
	assert.Equal(t, "dark", v)
}

func TestPluginSkipsARuleWhoseKeyPartIsMissing(t *testing.T) {
	host, status := emulate(t, `{"rules":[{"name":"per-key","key":[{"header":"x-api-key"}],"limits":[{"rate":"1/h"}]}]}`)
	require.Equal(t, types.OnPluginStartStatusOK, status)
	for range 3 {
		id := host.InitializeHttpContext()
		assert.Equal(t, types.ActionContinue, host.CallOnRequestHeaders(id, request("/"), true), "no x-api-key: the rule does not apply")
	}
	id := host.InitializeHttpContext()
	host.CallOnRequestHeaders(id, request("/", [2]string{"x-api-key", "k1"}), true)
	id = host.InitializeHttpContext()
	assert.Equal(t, types.ActionPause, host.CallOnRequestHeaders(id, request("/", [2]string{"x-api-key", "k1"}), true))
}
