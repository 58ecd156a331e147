//go:build !tinygo

package filter

import (
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/proxytest"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

// The global path natively, through the SDK's emulator: the emulator records each proxy_http_call,
// and the test answers it as the decision service (or a failing cluster) would.

const serviceCluster = "outbound|8081||meshlimit.meshlimit.svc.cluster.local"

func globalConfig(rule string) string {
	return `{"global":{"cluster":"` + serviceCluster + `","timeout":"200ms","breaker":{"failures":2,"cooldown":"1h"}},"rules":[` + rule + `]}`
}

// serviceAnswer is a 200 answer of /v1/check with one decision.
func serviceAnswer(allowed bool, remaining, retryMs int) (headers [][2]string, body []byte) {
	a := "true"
	if !allowed {
		a = "false"
	}
	b := `{"allowed":` + a + `,"decisions":[{"allowed":` + a + `,"limit":10,"remaining":` + strconv.Itoa(remaining) +
		`,"reset_ms":1000,"retry_after_ms":` + strconv.Itoa(retryMs) + `}]}`
	return [][2]string{{":status", "200"}, {"content-type", "application/json"}}, []byte(b)
}

// pendingCall returns the one callout the request made, failing the test if there is not exactly one.
func pendingCall(t *testing.T, host proxytest.HostEmulator, id uint32) proxytest.HttpCalloutAttribute {
	t.Helper()
	calls := host.GetCalloutAttributesFromContext(id)
	require.Len(t, calls, 1, "one call to the decision service")
	return calls[0]
}

func metric(t *testing.T, host proxytest.HostEmulator, name string) uint64 {
	t.Helper()
	host.Tick() // the counters kept in the guest reach the host on the tick
	n, err := host.GetCounterMetric(name)
	require.NoError(t, err, name)
	return n
}

func TestAGlobalRuleAsksTheServiceOnceAndResumesTheRequestItAllows(t *testing.T) {
	host, status := emulate(t, globalConfig(`{"name":"per-user","scope":"global","key":[{"header":"x-user"}],"limits":[{"rate":"10/m"}]}`))
	require.Equal(t, types.OnPluginStartStatusOK, status)
	id := host.InitializeHttpContext()
	require.Equal(t, types.ActionPause, host.CallOnRequestHeaders(id, request("/", [2]string{"x-user", "alice"}), true))
	call := pendingCall(t, host, id)
	assert.Equal(t, serviceCluster, call.Upstream)
	path, _ := pairValue(call.Headers, ":path")
	assert.Equal(t, "/v1/check", path)
	body := string(call.Body)
	assert.Contains(t, body, `/alice"`, "the key value ends the descriptor key")
	assert.Contains(t, body, `"algorithm":"token_bucket","quota":10,"window_ms":60000`)

	h, b := serviceAnswer(true, 9, 0)
	host.CallOnHttpCallResponse(call.CalloutID, h, nil, b)
	assert.Equal(t, types.ActionContinue, host.GetCurrentHttpStreamAction(id))
	assert.Nil(t, host.GetSentLocalResponse(id))
	assert.Equal(t, uint64(1), metric(t, host, "meshlimit.rule.per-user.allowed"))
}

func TestAGlobalDenialIsAnsweredAndRememberedUntilItsRetryAfter(t *testing.T) {
	host, _ := emulate(t, globalConfig(`{"name":"per-user","scope":"global","key":[{"header":"x-user"}],"limits":[{"rate":"10/m"}]}`))
	id := host.InitializeHttpContext()
	host.CallOnRequestHeaders(id, request("/", [2]string{"x-user", "bob"}), true)
	h, b := serviceAnswer(false, 0, 60000)
	host.CallOnHttpCallResponse(pendingCall(t, host, id).CalloutID, h, nil, b)
	reply := host.GetSentLocalResponse(id)
	require.NotNil(t, reply)
	assert.Equal(t, uint32(429), reply.StatusCode)

	again := host.InitializeHttpContext()
	assert.Equal(t, types.ActionPause, host.CallOnRequestHeaders(again, request("/", [2]string{"x-user", "bob"}), true))
	assert.Empty(t, host.GetCalloutAttributesFromContext(again), "the over-limit cache answers without a call")
	require.NotNil(t, host.GetSentLocalResponse(again))
	assert.Equal(t, uint64(1), metric(t, host, "meshlimit.rule.per-user.cached_denials"))

	other := host.InitializeHttpContext()
	host.CallOnRequestHeaders(other, request("/", [2]string{"x-user", "carol"}), true)
	assert.Len(t, host.GetCalloutAttributesFromContext(other), 1, "another key is not blocked by bob's denial")
}

func TestAFailingServiceAppliesTheRuleFallbackInTheProxy(t *testing.T) {
	host, _ := emulate(t, globalConfig(`{"name":"per-user","scope":"global","key":[{"header":"x-user"}],"limits":[{"rate":"10/m"}],
		"fallback":[{"rate":"1/h"}]}`))
	statuses := []uint32{}
	for range 2 {
		id := host.InitializeHttpContext()
		host.CallOnRequestHeaders(id, request("/", [2]string{"x-user", "dave"}), true)
		host.CallOnHttpCallResponse(pendingCall(t, host, id).CalloutID, [][2]string{{":status", "503"}}, nil, []byte(`{"error":"store unavailable"}`))
		if r := host.GetSentLocalResponse(id); r != nil {
			statuses = append(statuses, r.StatusCode)
		} else {
			statuses = append(statuses, 200)
		}
	}
	assert.Equal(t, []uint32{200, 429}, statuses, "the fallback's 1/h admits one and denies the next")
	assert.Equal(t, uint64(2), metric(t, host, "meshlimit.rule.per-user.fallback"))
}

func TestTheBreakerStopsCallingAFailingServiceAndFailsOpenByDefault(t *testing.T) {
	host, _ := emulate(t, globalConfig(`{"name":"per-user","scope":"global","key":[{"header":"x-user"}],"limits":[{"rate":"10/m"}]}`))
	for range 2 {
		id := host.InitializeHttpContext()
		host.CallOnRequestHeaders(id, request("/", [2]string{"x-user", "erin"}), true)
		host.CallOnHttpCallResponse(pendingCall(t, host, id).CalloutID, nil, nil, nil) // a reset: no headers
		assert.Nil(t, host.GetSentLocalResponse(id), "failure_mode allow lets the request through")
	}
	id := host.InitializeHttpContext()
	assert.Equal(t, types.ActionContinue, host.CallOnRequestHeaders(id, request("/", [2]string{"x-user", "erin"}), true))
	assert.Empty(t, host.GetCalloutAttributesFromContext(id), "the open breaker short-circuits the call")
	assert.Equal(t, uint64(1), metric(t, host, "meshlimit.global.breaker_opened"))
	assert.Equal(t, uint64(1), metric(t, host, "meshlimit.global.short_circuited"))
}

func TestFailureModeDenyClosesTheDoorWhenTheServiceFails(t *testing.T) {
	host, _ := emulate(t, globalConfig(`{"name":"per-user","scope":"global","failure_mode":"deny","key":[{"header":"x-user"}],"limits":[{"rate":"10/m"}]}`))
	id := host.InitializeHttpContext()
	host.CallOnRequestHeaders(id, request("/", [2]string{"x-user", "frank"}), true)
	host.CallOnHttpCallResponse(pendingCall(t, host, id).CalloutID, [][2]string{{":status", "504"}}, nil, nil)
	require.NotNil(t, host.GetSentLocalResponse(id))
	assert.Equal(t, uint64(1), metric(t, host, "meshlimit.rule.per-user.failure_denied"))
}

func TestLeasedUnitsAdmitRequestsWithoutACall(t *testing.T) {
	host, status := emulate(t, globalConfig(`{"name":"per-user","scope":"global","key":[{"header":"x-user"}],"limits":[{"rate":"100/m"}],
		"lease":{"batch":5,"ttl":"1h"}}`))
	require.Equal(t, types.OnPluginStartStatusOK, status)
	require.NotZero(t, host.GetTickPeriod(), "leases renew on the timer")
	first := host.InitializeHttpContext()
	host.CallOnRequestHeaders(first, request("/", [2]string{"x-user", "gina"}), true)
	h, b := serviceAnswer(true, 99, 0)
	host.CallOnHttpCallResponse(pendingCall(t, host, first).CalloutID, h, nil, b)

	host.Tick() // the first request asked for a lease: the tick dispatches it

	// The tick also reads the reset log (resets.go): the lease is the call to /v1/check.
	var leaseCalls []proxytest.HttpCalloutAttribute
	for _, c := range host.GetCalloutAttributesFromContext(proxytest.PluginContextID) {
		if path, _ := pairValue(c.Headers, ":path"); path == "/v1/check" {
			leaseCalls = append(leaseCalls, c)
		}
	}
	require.NotEmpty(t, leaseCalls, "a lease call on the tick")
	lease := leaseCalls[len(leaseCalls)-1]
	assert.True(t, strings.Contains(string(lease.Body), `"cost":5`), "a lease asks for a batch: %s", lease.Body)
	h, b = serviceAnswer(true, 94, 0)
	host.CallOnHttpCallResponse(lease.CalloutID, h, nil, b)

	for i := range 4 {
		id := host.InitializeHttpContext()
		assert.Equal(t, types.ActionContinue, host.CallOnRequestHeaders(id, request("/", [2]string{"x-user", "gina"}), true), "request %d", i)
		assert.Empty(t, host.GetCalloutAttributesFromContext(id), "request %d spends leased units", i)
	}
	assert.Equal(t, uint64(5), metric(t, host, "meshlimit.rule.per-user.leased"))
	assert.Equal(t, uint64(4), metric(t, host, "meshlimit.rule.per-user.lease_spent"))
}
