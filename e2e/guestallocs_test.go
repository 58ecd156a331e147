package e2e

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The request path of the compiled filter allocates nothing on the guest's heap once warm: host
// reads land in reused buffers, contexts are recycled, responses are rendered into reused buffers.
// The guest's allocator (runtime.mallocgc) is counted with wazero's function listeners, over the
// whole lifecycle of each request. The host re-entering proxy_on_memory_allocate to hand back a
// property or a shared-data value is not a heap allocation when the value lands in a reused buffer,
// so it is not counted here (the lifecycle benchmark counts those re-entries apart).
func TestAWarmRequestAllocatesNothingOnTheGuestHeap(t *testing.T) {
	for _, c := range []struct {
		name string
		c    lifecycleCase
	}{
		{"an allowed request with quota headers", lifecycleCases[1]},
		{"an allowed request without quota headers", lifecycleCases[2]},
		{"a denied request answered with every field", lifecycleCases[3]},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := countCalls(t, c.c, 200, nil)
			require.Greater(t, r.guest(), 100.0, "the counter sees the guest's calls")
			assert.Zero(t, r.of("runtime.mallocgc"), "heap allocations per request")
		})
	}
}

// The counter above does see an allocation: a rule with three limits outgrows the two outcomes a
// stream keeps inline for its quota headers, so each allowed request allocates their copy.
func TestTheGuestHeapCounterSeesAnAllocation(t *testing.T) {
	c := lifecycleCase{"three", "meshlimit", `{"rules":[{"name":"per-ip","key":["client_ip"],"limits":[{"rate":"1000000000/s"},{"rate":"1000000000/m"},{"rate":"1000000000/h"}]}]}`, nil}
	r := countCalls(t, c, 200, nil)
	assert.GreaterOrEqual(t, r.of("runtime.mallocgc"), 1.0)
}
