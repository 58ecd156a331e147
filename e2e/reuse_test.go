package e2e

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/internal/envoyhost"
)

// The filter receives the source address and shared-data values into buffers it reuses from request
// to request, and reuses the contexts of finished streams. Nothing of one request may show in the next.

func TestAShorterSourceAddressAfterALongerOneIsItsOwnKey(t *testing.T) {
	p := load(t, module(t, "meshlimit"), `{"rules":[{"name":"per-ip","key":["client_ip"],"limits":[{"rate":"1/h"}]}]}`, 1)
	vm := p.VM(0)
	ips := []string{"[2001:db8:ffff:ffff:ffff:ffff:ffff:1]", "198.51.100.200", "10.0.0.100", "10.0.0.1", "10.0.0.10"}
	for _, ip := range ips {
		assert.Equal(t, 200, status(roundTrip(t, vm, get("api.example", "/", ip))), "%s is a fresh key", ip)
	}
	for i := len(ips) - 1; i >= 0; i-- {
		assert.Equal(t, 429, status(roundTrip(t, vm, get("api.example", "/", ips[i]))), "%s has spent its quota", ips[i])
	}
}

func TestARequestThatNoRuleMatchesGetsNoQuotaHeadersAfterOneThatDid(t *testing.T) {
	p := load(t, module(t, "meshlimit"), `{"rules":[{"name":"api","match":{"path":{"prefix":"/api/"}},"key":["client_ip"],"limits":[{"rate":"100/s"}]}]}`, 1)
	vm := p.VM(0)
	for range 3 {
		res := roundTrip(t, vm, get("api.example", "/api/items", "192.0.2.7"))
		require.Nil(t, res.LocalReply)
		_, ok := res.Downstream.Get("ratelimit")
		assert.True(t, ok, "a limited path gets quota headers")
		res = roundTrip(t, vm, get("api.example", "/static/app.js", "192.0.2.7"))
		require.Nil(t, res.LocalReply)
		_, ok = res.Downstream.Get("ratelimit")
		assert.False(t, ok, "a path no rule matches gets none, whatever the stream before it got")
	}
}

func TestStreamsInFlightTogetherKeepTheirOwnQuota(t *testing.T) {
	p := load(t, module(t, "meshlimit"), `{"rules":[{"name":"per-ip","key":["client_ip"],"limits":[{"rate":"5/h"}]}]}`, 1)
	vm := p.VM(0)
	a := vm.NewStream(envoyhost.StreamInfo{SourceAddress: "192.0.2.1:40000"})
	_, err := a.SendRequestHeaders(get("api.example", "/", "192.0.2.1").Headers, true)
	require.NoError(t, err)
	// Streams that start and finish while a is open reuse contexts; a's must stay its own.
	for range 3 {
		roundTrip(t, vm, get("api.example", "/", "192.0.2.2"))
	}
	_, err = a.SendResponseHeaders(ok200.Headers, false)
	require.NoError(t, err)
	_, err = a.SendResponseBody(ok200.Body, true)
	require.NoError(t, err)
	got, _ := a.DownstreamHeaders().Get("ratelimit")
	assert.Equal(t, `"per-ip";r=4;t=720`, got, "a's own decision: one of five spent")
	require.NoError(t, a.Close())
	res := roundTrip(t, vm, get("api.example", "/", "192.0.2.2"))
	got, _ = res.Downstream.Get("ratelimit")
	assert.Equal(t, `"per-ip";r=1;t=720`, got, "the other key's fourth request")
}
