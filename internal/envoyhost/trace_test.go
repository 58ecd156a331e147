package envoyhost_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/internal/envoyhost"
)

func TestATraceRecordsTheHostCallsOfAStreamInOrderUntilStopped(t *testing.T) {
	p := newPlugin(t, "guest", envoyhost.Config{VMID: "v", Workers: 1})
	vm := p.VM(0)
	roundTrip(t, vm, op("")) // the VM's first stream, untraced
	stop := vm.TraceHostCalls()
	roundTrip(t, vm, op(""))
	calls := stop()
	roundTrip(t, vm, op("")) // after stop: recorded nowhere
	var adds []envoyhost.HostCall
	for _, c := range calls {
		if c.Func == "proxy_add_header_map_value" {
			adds = append(adds, c)
		}
	}
	require.Len(t, adds, 2, "the guest adds one request and one response header: %v", calls)
	// (map, name ptr, name size, value ptr, value size): x-guest: <stream id> on the request headers
	// (map 0), then x-guest-response: <stream id> on the response headers (map 2), both accepted.
	assert.Equal(t, []uint64{0, 7, 1}, []uint64{adds[0].Args[0], adds[0].Args[2], adds[0].Args[4]})
	assert.Equal(t, []uint64{2, 16, 1}, []uint64{adds[1].Args[0], adds[1].Args[2], adds[1].Args[4]})
	assert.Zero(t, adds[0].Result)
	assert.Zero(t, adds[1].Result)
	again := vm.TraceHostCalls()
	assert.Empty(t, again(), "a new trace starts empty")
}
