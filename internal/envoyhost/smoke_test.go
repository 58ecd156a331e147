package envoyhost_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/internal/envoyhost"
)

func TestPassThroughRequestIsForwardedWithGuestHeaders(t *testing.T) {
	p := newPlugin(t, "guest", envoyhost.Config{VMID: "v", Workers: 2})
	res := roundTrip(t, p.VM(0), op(""))
	require.Nil(t, res.LocalReply)
	got, _ := res.Upstream.Get("x-guest")
	assert.Equal(t, "2", got, "the first stream id follows the root context id 1")
	got, _ = res.Downstream.Get("x-guest-response")
	assert.Equal(t, "2", got)
	for _, e := range p.Logs() {
		t.Log(e)
	}
	m := p.Process().Metrics()
	assert.Equal(t, int64(1), m["logs"].Value)
	assert.Equal(t, int64(1), m["dones"].Value)
	assert.Equal(t, int64(1), m["deletes"].Value)
	assert.Zero(t, p.PollOneoffCalls())
}
