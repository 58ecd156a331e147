package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/internal/envoyhost"
)

// hostCallShape is the part of a host call that does not depend on where the guest keeps its
// memory or on the state it finds: the function, the arguments that are sizes or values (not
// pointers, not a metric's id, not a compare-and-swap value), and what it returned.
func hostCallShape(t *testing.T, c envoyhost.HostCall) string {
	t.Helper()
	sizes := map[string][]int{ // positions of the size and value arguments
		"clock_time_get":             {0, 1},    // clock id, precision
		"proxy_get_property":         {1},       // path size
		"proxy_get_shared_data":      {1},       // key size
		"proxy_set_shared_data":      {1, 3},    // key size, value size
		"proxy_add_header_map_value": {0, 2, 4}, // map, name size, value size
		"proxy_get_header_map_value": {0, 2},    // map, name size
		"proxy_increment_metric":     {1},       // offset
	}
	pos, ok := sizes[c.Func]
	require.True(t, ok, "the trace holds %s, which hostCallShape does not know: add it (and to cmd/hostfloor if the filter makes it)", c.Func)
	s := c.Func
	for _, i := range pos {
		s += fmt.Sprintf(" %d", c.Args[i])
	}
	return s + fmt.Sprintf(" -> %d", c.Result)
}

// floorSlotDigits is how many base-36 digits end the floor's record key, for a slot of 1296 or more
// (most of them). The filter's slot, and so its key's length, is where the process's random secret
// puts the client: its trace is compared as if its slot had as many digits.
const floorSlotDigits = 3

// recordKeySize returns the size the filter's record key of rule per-ip would have with a slot of
// floorSlotDigits digits, from the one record key the plugin p wrote.
func recordKeySize(t *testing.T, p *envoyhost.Plugin) int {
	t.Helper()
	var keys []string
	for k := range p.Process().SharedData("meshlimit") {
		if strings.Contains(k, "/per-ip/") {
			keys = append(keys, k)
		}
	}
	require.Len(t, keys, 1, "one client, one record")
	slot := keys[0][strings.LastIndexByte(keys[0], '/')+1:]
	return len(keys[0]) - len(slot) + floorSlotDigits
}

// warmTrace returns the shapes of the host calls of one warm request through vm; keySize, when not
// nil, stands for the size of every shared-data key.
func warmTrace(t *testing.T, vm *envoyhost.VM, keySize func() int) []string {
	t.Helper()
	ctx := context.Background()
	req := get("bench.example", "/api/items?page=2", "203.0.113.77", [2]string{"user-agent", "bench"})
	for range 3 {
		_, err := vm.RoundTrip(ctx, req, ok200)
		require.NoError(t, err)
	}
	stop := vm.TraceHostCalls()
	_, err := vm.RoundTrip(ctx, req, ok200)
	calls := stop()
	require.NoError(t, err)
	shapes := make([]string, len(calls))
	for i, c := range calls {
		if keySize != nil && (c.Func == "proxy_get_shared_data" || c.Func == "proxy_set_shared_data") {
			c.Args[1] = uint64(keySize())
		}
		shapes[i] = hostCallShape(t, c)
	}
	return shapes
}

// cmd/hostfloor stands for the host calls of the filter's allowed request (the benchmarks' per-IP
// rule, with and without the quota headers): it must make the same calls, in the same order, with
// the same sizes (the record key's slot number aside, see floorSlotDigits), or its figures would
// measure something else.
func TestTheHostCallFloorMakesTheHostCallsOfTheFilterItStandsFor(t *testing.T) {
	const rule = `"rules":[{"name":"per-ip","key":["client_ip"],"limits":[{"rate":"1000000000/s"}]}]`
	cases := []struct{ name, filter, floor string }{
		{"quota headers", `{` + rule + `}`, `{}`},
		{"no quota headers", `{` + rule + `,"response":{"quota_headers_on_allowed":false}}`, `{"quota_headers":false}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := load(t, module(t, "meshlimit"), c.filter, 1)
			filter := warmTrace(t, p.VM(0), func() int { return recordKeySize(t, p) })
			floor := warmTrace(t, load(t, module(t, "hostfloor"), c.floor, 1).VM(0), nil)
			require.NotEmpty(t, filter)
			assert.Equal(t, filter, floor)
		})
	}
}

func TestTheHostCallFloorRefusesAConfigurationItCannotRead(t *testing.T) {
	_, err := envoyhost.NewPlugin(context.Background(), module(t, "hostfloor"), envoyhost.Config{
		VMID: "hostfloor", PluginName: "hostfloor", RootID: "hostfloor", PluginConfig: []byte(`{"quota_headers":"no"}`),
		Workers: 1, Clock: envoyhost.NewClock(epoch),
	})
	assert.ErrorContains(t, err, "proxy_on_configure returned false")
}
