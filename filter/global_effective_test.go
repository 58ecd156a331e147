package filter

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

// TestAGlobalSlidingWindowsTIsTheEffectiveWindowTheServiceComputed: the service's answer carries the
// effective window (effective_ms) and the filter sends it as t, not the time until the quota is
// full (reset_ms), which is only an upper bound for the sliding algorithms.
func TestAGlobalSlidingWindowsTIsTheEffectiveWindowTheServiceComputed(t *testing.T) {
	for _, tc := range []struct {
		name   string
		answer string
		t      int64
	}{
		{"with the effective window, t is it", `{"allowed":true,"limit":10,"remaining":5,"reset_ms":95000,"retry_after_ms":0,"effective_ms":40001}`, 41},
		{"without it (an older service), t is the time until full", `{"allowed":true,"limit":10,"remaining":5,"reset_ms":95000,"retry_after_ms":0}`, 95},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeHost(t)
			p := f.start(globalWith(``, `{"name":"per-user","scope":"global","key":[{"header":"x-user"}],"limits":[{"rate":"10/m","algorithm":"sliding_window"}]}`))
			h, act := f.open(p, user("alice"), true)
			require.Equal(t, types.ActionPause, act, "paused for the service")
			f.answerCall(f.callTo("/v1/check"), "200", checkAnswers(tc.answer))
			f.respond(h, [][2]string{{":status", "200"}}, true)
			rl, ok := pairValue(f.of(h).resp, "ratelimit")
			require.True(t, ok)
			assert.Equal(t, tc.t, policyParam(t, rl, "t"), rl)
			assert.Equal(t, int64(5), policyParam(t, rl, "r"))
		})
	}
}
