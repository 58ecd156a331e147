package filter

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

const (
	traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	b3Single    = "4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1"
)

// checkCallHeaders opens a request of alice with extra headers under a global rule and returns
// the headers of its call to the service.
func checkCallHeaders(t *testing.T, extra ...[2]string) [][2]string {
	t.Helper()
	f := newFakeHost(t)
	p := f.start(globalRule(`"scope":"global"`))
	_, act := f.open(p, fakeReq("/", append([][2]string{{"x-user", "alice"}}, extra...)...), true)
	require.Equal(t, types.ActionPause, act)
	return f.callTo("/v1/check").headers
}

func TestTheCheckCallCarriesTheRequestsTraceContext(t *testing.T) {
	headers := checkCallHeaders(t,
		[2]string{"traceparent", traceparent}, [2]string{"tracestate", "congo=t61rcWkgMzE, rojo=00f067aa0ba902b7"},
		[2]string{"b3", b3Single},
		[2]string{"x-b3-traceid", "4bf92f3577b34da6a3ce929d0e0e4736"}, [2]string{"x-b3-spanid", "00f067aa0ba902b7"},
		[2]string{"x-b3-parentspanid", "5fd3a2e1c0b9a877"}, [2]string{"x-b3-sampled", "1"}, [2]string{"x-b3-flags", "1"},
		[2]string{"x-request-id", "3e1b8c5a-2f4d-4a6b-9c7e-1d2f3a4b5c6d"}, [2]string{"authorization", "Bearer secret"})
	assert.Equal(t, [][2]string{
		{":method", "POST"}, {":path", "/v1/check"}, {":authority", "meshlimit.svc"}, {"content-type", "application/json"},
		{"traceparent", traceparent}, {"tracestate", "congo=t61rcWkgMzE, rojo=00f067aa0ba902b7"}, {"b3", b3Single},
		{"x-b3-traceid", "4bf92f3577b34da6a3ce929d0e0e4736"}, {"x-b3-spanid", "00f067aa0ba902b7"},
		{"x-b3-parentspanid", "5fd3a2e1c0b9a877"}, {"x-b3-sampled", "1"}, {"x-b3-flags", "1"},
		{"x-request-id", "3e1b8c5a-2f4d-4a6b-9c7e-1d2f3a4b5c6d"},
	}, headers, "the trace headers after the client's own, and no other header of the request")
}

func TestACheckCallOfARequestWithoutTraceContextHasTheClientsHeadersOnly(t *testing.T) {
	headers := checkCallHeaders(t)
	assert.Equal(t, [][2]string{{":method", "POST"}, {":path", "/v1/check"}, {":authority", "meshlimit.svc"}, {"content-type", "application/json"}}, headers)
}

// Trace headers are client input: the filter forwards none beyond its bound (truncating would
// forward an invalid one) nor one with control bytes; the service ignores what it cannot parse.
func TestAClientThatSendsOversizedOrBinaryTraceHeadersGetsThemDroppedFromTheCheckCall(t *testing.T) {
	for name, h := range map[string][2]string{
		"an oversized traceparent":  {"traceparent", traceparent + strings.Repeat("-00", 40)},
		"an oversized tracestate":   {"tracestate", "a=" + strings.Repeat("b", 511)},
		"an oversized x-request-id": {"x-request-id", strings.Repeat("r", 129)},
		"a 33-byte x-b3-traceid":    {"x-b3-traceid", strings.Repeat("a", 33)},
		"a traceparent with a NUL":  {"traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736\x00-00f067aa0ba902b7-01"},
		"a b3 with a DEL":           {"b3", b3Single + "\x7f"},
		"an empty b3":               {"b3", ""},
	} {
		t.Run(name, func(t *testing.T) {
			headers := checkCallHeaders(t, h, [2]string{"x-b3-sampled", "0"})
			_, found := pairValue(headers, h[0])
			assert.False(t, found, "%s is not forwarded", h[0])
			sampled, _ := pairValue(headers, "x-b3-sampled")
			assert.Equal(t, "0", sampled, "the valid trace headers beside it still are")
		})
	}
}

func TestForwardingTheTraceContextAllocatesNothingOnceWarm(t *testing.T) {
	f := newFakeHost(t)
	p := f.start(globalRule(`"scope":"global"`))
	f.open(p, fakeReq("/", [2]string{"x-user", "alice"}, [2]string{"traceparent", traceparent}, [2]string{"b3", b3Single},
		[2]string{"x-request-id", "3e1b8c5a-2f4d-4a6b-9c7e-1d2f3a4b5c6d"}), true)
	f.cur = f.streams[f.next]
	defer f.leave()
	tc := newTraceContext()
	base := [][2]string{{":method", "POST"}}
	tc.callHeaders(f, base)
	allocs := testing.AllocsPerRun(100, func() { tc.callHeaders(f, base) })
	assert.Zero(t, allocs)
	assert.Len(t, tc.callHeaders(f, base), 4)
}

// A count_on charge is a decision of the service too: its call, made on the response path after a
// check that failed, carries the request's trace context.
func TestTheChargeCallOfACountedGlobalRuleCarriesTheRequestsTraceContext(t *testing.T) {
	f := newFakeHost(t)
	p := f.start(globalWith(``, loginRule("global", `{"status":["401"]}`)))
	h, _ := f.open(p, fakeReq("/", [2]string{"x-user", "eve"}, [2]string{"traceparent", traceparent}), true)
	f.answerCall(f.callOf(h), "503", `{"error":"x"}`)
	require.Equal(t, types.ActionPause, f.respond(h, [][2]string{{":status", "401"}}, true))
	got, _ := pairValue(f.callOf(h).headers, "traceparent")
	assert.Equal(t, traceparent, got)
}
