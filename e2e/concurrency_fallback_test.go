package e2e

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/internal/envoyhost"
)

// fallbackConcConfig is a global concurrency limit of 50 per tenant whose fallback, while the
// service cannot decide, is 3 permits per tenant in this proxy (failure_mode allow would let
// every request through).
func fallbackConcConfig() string {
	return globalConfig(`{"name":"gpu","scope":"global","key":[{"header":"x-tenant"}],"failure_mode":"allow",
		"limits":[{"concurrency":50,"name":"gpu-slots"}],"fallback":[{"concurrency":3,"name":"gpu-local"}]}`)
}

func TestWhenTheServiceIsDownTheLocalFallbackBoundsTheRequestsInFlight(t *testing.T) {
	clock := envoyhost.NewClock(epoch)
	svc := startService(t, clock)
	svc.down.Store(true)
	p := load(t, module(t, "meshlimit"), fallbackConcConfig(), 2, withService(svc, nil),
		func(c *envoyhost.Config) { c.Clock = clock })
	var admitted []*envoyhost.Stream
	var last *envoyhost.Stream
	for i := range 10 { // the first three calls fail, then the breaker is open
		s, ok := openGlobal(t, p.VM(i%2), tenant("acme"))
		if ok {
			admitted = append(admitted, s)
		}
		last = s
	}
	assert.Len(t, admitted, 3, "both workers together hold the fallback's 3 permits")
	assert.Equal(t, int64(2), counter(p, "meshlimit.global.breaker_opened"), "each worker opens its own breaker")
	assert.Equal(t, int64(10), counter(p, "meshlimit.rule.gpu.fallback"))
	lr := last.LocalReply()
	require.NotNil(t, lr)
	assert.Equal(t, 429, lr.Status)
	policy, _ := lr.Headers.Get("ratelimit-policy")
	assert.Contains(t, policy, `"gpu-local";q=3;qu="concurrent-requests"`)

	_, ok := openGlobal(t, p.VM(0), tenant("other"))
	assert.True(t, ok, "another tenant has its own fallback permits")

	_, err := admitted[0].SendResponseHeaders(envoyhost.Headers{{":status", "200"}}, true)
	require.NoError(t, err)
	require.NoError(t, admitted[0].Close())
	require.NoError(t, admitted[1].Close()) // a reset
	n := 0
	for i := range 4 {
		if _, ok := openGlobal(t, p.VM(i%2), tenant("acme")); ok {
			n++
		}
	}
	assert.Equal(t, 2, n, "the two streams that ended gave their permits back, no more")
}

func TestAFallbackPermitIsGivenBackWhenTheRequestIsDeniedByTheFallback(t *testing.T) {
	clock := envoyhost.NewClock(epoch)
	svc := startService(t, clock)
	svc.down.Store(true)
	p := load(t, module(t, "meshlimit"), fallbackConcConfig(), 1, withService(svc, nil),
		func(c *envoyhost.Config) { c.Clock = clock })
	for range 20 { // every one of these ends at once: admitted or denied, nothing stays held
		s, _ := openGlobal(t, p.VM(0), tenant("acme"))
		require.NoError(t, s.Close())
	}
	n := 0
	for range 5 {
		if _, ok := openGlobal(t, p.VM(0), tenant("acme")); ok {
			n++
		}
	}
	assert.Equal(t, 3, n)
}
