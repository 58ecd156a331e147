//go:build !tinygo

package filter

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

// Trailers end a request whose body did not end (gRPC, or a body sent without end_of_stream). Envoy
// delivers them to a filter that is buffering the body; the rules still waiting for the body then
// decide with their default instead of letting the held body through undecided. (The wazero host
// holds trailers back while the body is buffered, so this is tested on the SDK's emulator.)
func TestTrailersDecideTheRulesThatWaitedForTheBodyWithTheirDefault(t *testing.T) {
	const budget = `{"name":"tokens","scope":"%s","key":[{"header":"x-user"}],"limits":[{"rate":"1000/d"}],
		"cost":{"request_json":"max_tokens","default":500,"settle":{"response_json":"usage.total_tokens"}}}`
	t.Run("a global rule makes its call at the trailers", func(t *testing.T) {
		host, status := emulate(t, globalConfig(fmt.Sprintf(budget, "global")))
		require.Equal(t, types.OnPluginStartStatusOK, status)
		id := host.InitializeHttpContext()
		require.Equal(t, types.ActionContinue, host.CallOnRequestHeaders(id, request("/", [2]string{"x-user", "alice"}), false))
		assert.Equal(t, types.ActionPause, host.CallOnRequestBody(id, []byte(`{"max_tokens": 9`), false), "held until the body ends")
		assert.Empty(t, host.GetCalloutAttributesFromContext(id), "no call before the body")
		assert.Equal(t, types.ActionPause, host.CallOnRequestTrailers(id, [][2]string{{"grpc-status", "0"}}))
		call := pendingCall(t, host, id)
		assert.Contains(t, string(call.Body), `"cost":500`, "the default, not the unfinished body's 9")
		assert.Equal(t, uint64(1), metric(t, host, "meshlimit.rule.tokens.bad_body"))
		h, b := serviceAnswer(true, 500, 0)
		host.CallOnHttpCallResponse(call.CalloutID, h, nil, b)
		assert.Equal(t, types.ActionContinue, host.GetCurrentHttpStreamAction(id))
	})
	t.Run("a local rule decides at the trailers", func(t *testing.T) {
		host, _ := emulate(t, `{"rules":[`+fmt.Sprintf(budget, "local")+`]}`)
		for i, want := range []types.Action{types.ActionContinue, types.ActionContinue, types.ActionPause} {
			id := host.InitializeHttpContext()
			host.CallOnRequestHeaders(id, request("/", [2]string{"x-user", "bob"}), false)
			require.Equal(t, types.ActionPause, host.CallOnRequestBody(id, []byte(`{"max_tokens": 1`), false))
			assert.Equal(t, want, host.CallOnRequestTrailers(id, nil), "request %d reserves 500 of 1000", i)
		}
		assert.Equal(t, uint64(3), metric(t, host, "meshlimit.rule.tokens.bad_body"))
		assert.Equal(t, uint64(1), metric(t, host, "meshlimit.rule.tokens.limited"))
	})
}
