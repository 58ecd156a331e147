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
		{"a count_on request whose answer is not counted", lifecycleResponseCases[0]},
		{"a count_on request whose 401 is counted", lifecycleResponseCases[1]},
		{"a reservation settled from a response header", lifecycleResponseCases[2]},
		{"an allowed request of a rule with three limits (more than the context keeps inline)", threeLimits},
		{"a local rule's request in a plugin that also has a global service", withGlobalSection},
		{"an allowed request of a monthly quota (its policy rendered per period)", monthlyQuota},
		{"a request of an adaptive shedder, sampled and released at its response headers", withAdaptiveShedder},
		{"a request of a shedder with a key share, from a client seen within the last renewal", withKeyShare},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := countCalls(t, c.c, 200, nil)
			t.Logf("per request: %.1f host calls, %.1f guest calls", r.host(), r.guest())
			require.Greater(t, r.guest(), 100.0, "the counter sees the guest's calls")
			assert.Zero(t, r.of("runtime.mallocgc"), "heap allocations per request")
		})
	}
}

// threeLimits is a rule with three limits: more outcomes than a context keeps inline for its quota
// headers (its spare array is allocated once and kept when the context is recycled).
var threeLimits = lifecycleCase{"three", "meshlimit", `{"rules":[{"name":"per-ip","key":["client_ip"],"limits":[{"rate":"1000000000/s"},{"rate":"1000000000/m"},{"rate":"1000000000/h"}]}]}`, nil}

// withGlobalSection is a local rule in a plugin configured with a decision service (its reset log
// not read): a stream that made no call to the service is recycled like any other.
var withGlobalSection = lifecycleCase{"global-section", "meshlimit", `{"global":{"cluster":"outbound|8081||meshlimit","reset_poll":"off"},"rules":[{"name":"per-ip","key":["client_ip"],"limits":[{"rate":"1000000000/s"}]}]}`, nil}

// monthlyQuota is a calendar window, whose RateLimit-Policy is rendered with the period at hand
// rather than copied from the configuration.
var monthlyQuota = lifecycleCase{"monthly", "meshlimit", `{"rules":[{"name":"per-ip","key":["client_ip"],"limits":[{"rate":"1000000000/month","calendar_offset":"+02:00"}]}]}`, nil}

// withAdaptiveShedder is a local rule and an adaptive shedder: the response headers are classified
// (response.code_details, :status) and sampled.
var withAdaptiveShedder = lifecycleCase{"adaptive-shed", "meshlimit", `{"rules":[{"name":"per-ip","key":["client_ip"],"limits":[{"rate":"1000000000/s"}]}],"shed":{"adaptive":{}}}`, nil}

// withKeyShare is a local rule and a shedder with a key share. The filter keeps its own copy of
// each key it holds slots of: a key's first request allocates it, and its next ones reuse it until
// a renewal (every 2 s) finds that the key holds nothing and forgets it.
var withKeyShare = lifecycleCase{"key-share", "meshlimit", `{"rules":[{"name":"per-ip","key":["client_ip"],"limits":[{"rate":"1000000000/s"}]}],"shed":{"capacity":1000,"key_share":100}}`, nil}

// The counter above does see an allocation: at log level debug, the filter formats a debug line
// for each decision (fmt allocates), which is why debug is not a level for production traffic.
func TestTheGuestHeapCounterSeesAnAllocation(t *testing.T) {
	c := lifecycleCase{"debug", "meshlimit", `{"log_level":"debug","rules":[{"name":"per-ip","key":["client_ip"],"limits":[{"rate":"1000000000/s"}]}]}`, nil}
	r := countCalls(t, c, 200, nil)
	assert.GreaterOrEqual(t, r.of("runtime.mallocgc"), 1.0)
}
