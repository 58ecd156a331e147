package e2e

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/internal/envoyhost"
)

// leaseRun drives steady load at a global leased rule: 2 proxies × 2 workers, one request per VM per
// millisecond of virtual time, and returns the admitted count and the plugins. With settle, every lease
// call is answered before virtual time moves on (every lease must be granted then); without, lease calls
// are answered while the requests go on, within answerEvery of virtual time. Either way the figures do
// not depend on how fast this machine runs the loop compared with the callouts' real latency.
func leaseRun(t *testing.T, rate string, batch int, steps int, settled bool) (admitted int, proxies []*envoyhost.Plugin, svc *decisionService) {
	t.Helper()
	const answerEvery = 10 // ms of virtual time: far below the 200 ms call timeout
	clock := envoyhost.NewClock(epoch)
	svc = startService(t, clock)
	cfg := globalConfig(`{"name":"tenant","scope":"global","key":[{"header":"x-tenant"}],"limits":[{"rate":"` + rate + `"}],
		"lease":{"batch":` + strconv.Itoa(batch) + `,"ttl":"1s"}}`)
	for range 2 {
		proxies = append(proxies, load(t, module(t, "meshlimit"), cfg, 1, withService(svc, envoyhost.NewProcess()),
			func(c *envoyhost.Config) { c.Clock = clock }))
	}
	for step := range steps {
		for _, p := range proxies {
			for _, vm := range p.VMs() {
				if res := roundTrip(t, vm, get("api.example", "/", "192.0.2.1", [2]string{"x-tenant", "acme"})); res.LocalReply == nil {
					admitted++
				}
			}
		}
		clock.Advance(time.Millisecond)
		if settled || step%answerEvery == answerEvery-1 {
			settle(t, proxies...)
		}
		if settled {
			require.Equal(t, int64(batch)*sum(proxies, "meshlimit.global.lease_calls"), sum(proxies, "meshlimit.rule.tenant.leased"),
				"every lease call is answered and granted")
		}
	}
	return admitted, proxies, svc
}

// sum adds name over proxies as the host has it: what their VMs' own ticks flushed (a tick
// delivered to read it would lease again, and change what is measured).
func sum(proxies []*envoyhost.Plugin, name string) (n int64) {
	for _, p := range proxies {
		n += hostCounter(p, name)
	}
	return n
}

func TestAtSteadyLoadLeasedRequestsNeedNoCallout(t *testing.T) {
	const steps = 500 // 4 VMs × 500 ms at 1 request per ms: 4000 requests/s, well under the limit
	admitted, proxies, _ := leaseRun(t, "100000/s", 50, steps, true)
	total := int64(4 * steps)
	assert.Equal(t, total, int64(admitted))
	spent := sum(proxies, "meshlimit.rule.tenant.lease_spent")
	calls := sum(proxies, "meshlimit.global.calls")
	leases := sum(proxies, "meshlimit.global.lease_calls")
	assert.Equal(t, total, spent+calls, "every request is admitted from a lease or by a call")
	share := float64(spent) / float64(total)
	assert.Greater(t, share, 0.9, "at steady load nearly every request is admitted from leased units")
	assert.LessOrEqual(t, calls, int64(4*20), "per-request calls only until the first lease lands (the first 20 ms tick)")
	t.Logf("%d requests: %d (%.1f%%) from leases with no callout, %d per-request calls, %d lease calls",
		total, spent, 100*share, calls, leases)
}

func TestLeasingOverAdmitsAtMostTheUnitsOutstandingInTheProxies(t *testing.T) {
	const batch = 10
	// 100/s with a burst of 100: in the 1 s run an exact limiter admits 100 + 100 = 200.
	admitted, proxies, _ := leaseRun(t, "100/s", batch, 1000, false)
	bound := 200 + 2*2*batch // P = 2 proxies, each holding less than two batches
	assert.LessOrEqual(t, admitted, bound)
	assert.GreaterOrEqual(t, admitted, 200-2*2*batch, "units stranded in a proxy's bucket are the only shortfall")
	require.Zero(t, sum(proxies, "meshlimit.global.failures"))
	t.Logf("admitted %d of 4000 (exact: 200, bound %d); %d units leased, %d lease calls, %d per-request calls",
		admitted, bound, sum(proxies, "meshlimit.rule.tenant.leased"), sum(proxies, "meshlimit.global.lease_calls"),
		sum(proxies, "meshlimit.global.calls"))
}
