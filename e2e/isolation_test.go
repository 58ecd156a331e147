package e2e

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/internal/envoyhost"
)

// Isolation (issue 10, findings 1, 7 and 11): a client that holds its state is decided as if it were
// alone, whatever other clients do, in the limit tables, the over-limit cache and the lease records.

func withKey(req *envoyhost.Request, name, value string) *envoyhost.Request {
	req.Headers = append(req.Headers, [2]string{name, value})
	return req
}

func TestMintingTwentyThousandKeysLeavesAnActiveClientItsWholeQuota(t *testing.T) {
	const workers, minted = 4, 20_000
	p := load(t, module(t, "meshlimit"), `{"rules":[{"name":"per-key","key":[{"header":"x-api-key"}],
		"limits":[{"rate":"10/m","algorithm":"fixed_window"}],"max_keys":1000}]}`, workers)
	call := func(vm int, key string) envoyhost.Result {
		return roundTrip(t, p.VM(vm%workers), withKey(get("api.example", "/", "192.0.2.1"), "x-api-key", key))
	}
	for i := range 3 {
		require.Nil(t, call(i, "alice").LocalReply, "alice's request %d", i+1)
	}
	admittedMinted := 0
	for i := range minted { // the clock is frozen: all of this happens within alice's window
		if call(i, "minted-"+strconv.Itoa(i)).LocalReply == nil {
			admittedMinted++
		}
	}
	remaining := 0
	for i := range 10 {
		res := call(i, "alice")
		if res.LocalReply != nil {
			break
		}
		remaining++
	}
	assert.Equal(t, 7, remaining, "alice used 3 of 10 before the flood and keeps the other 7")
	overflow := counter(p, "meshlimit.rule.per-key.overflow")
	assert.Positive(t, overflow, "the keys that found no room were decided in the overflow state")
	keys, _ := p.Process().SharedDataSize("meshlimit")
	assert.LessOrEqual(t, keys, 1000+3, "the slots, the overflow state, the sentinel and the secret")
	t.Logf("after %d minted keys (%d admitted, %d decided in the overflow state, %d evictions): alice has %d of 10 left",
		minted, admittedMinted, overflow, counter(p, "meshlimit.rule.per-key.evictions"), remaining)
}

func TestAnotherKeysLeaseCannotTakeOverTheLeasedUnitsOfAVictim(t *testing.T) {
	clock := envoyhost.NewClock(epoch)
	svc := startService(t, clock)
	// One lease slot: in a table of max_keys slots, every pair of keys could meet like this.
	cfg := globalConfig(`{"name":"tenant","scope":"global","key":[{"header":"x-tenant"}],"limits":[{"rate":"20/h"}],
		"lease":{"batch":5,"ttl":"1h"},"max_keys":1}`)
	p := load(t, module(t, "meshlimit"), cfg, 1, withService(svc, envoyhost.NewProcess()), func(c *envoyhost.Config) { c.Clock = clock })
	request := func(tenant string) bool {
		admitted := roundTrip(t, p.VM(0), withKey(get("api.example", "/", "192.0.2.1"), "x-tenant", tenant)).LocalReply == nil
		clock.Advance(20 * time.Millisecond) // the lease tick
		settle(t, p)
		return admitted
	}
	victim := 0
	if request("victim") { // a call, and a lease of 5 units charged to the victim
		victim++
	}
	require.Equal(t, int64(5), counter(p, "meshlimit.rule.tenant.leased"), "the victim holds a lease")
	for range 3 {
		request("mallory") // another key's requests, which want a lease of their own
	}
	for range 24 {
		if request("victim") {
			victim++
		}
	}
	assert.Equal(t, 20, victim, "the victim gets its whole 20/h: none of its leased units went to another key")
	t.Logf("victim admitted %d of 20; %d units leased, %d lease calls, %d admitted from leases",
		victim, counter(p, "meshlimit.rule.tenant.leased"), counter(p, "meshlimit.global.lease_calls"),
		counter(p, "meshlimit.rule.tenant.lease_spent"))
}

func TestAProxyNeverHoldsTwoBatchesOfLeasedUnits(t *testing.T) {
	const batch, steps = 10, 400
	clock := envoyhost.NewClock(epoch)
	svc := startService(t, clock)
	cfg := globalConfig(`{"name":"tenant","scope":"global","key":[{"header":"x-tenant"}],"limits":[{"rate":"100000/s"}],
		"lease":{"batch":` + strconv.Itoa(batch) + `,"ttl":"1s"}}`)
	// Two proxies, each with two worker VMs whose lease ticks are 10 ms apart (Envoy's worker timers are
	// not aligned): a worker that saw the units run low may tick after another worker's lease landed.
	procs := []*envoyhost.Process{envoyhost.NewProcess(), envoyhost.NewProcess()}
	var workers []*envoyhost.Plugin
	for i := range 4 {
		if i == 2 {
			clock.Advance(10 * time.Millisecond)
		}
		workers = append(workers, load(t, module(t, "meshlimit"), cfg, 1, withService(svc, procs[i%2]),
			func(c *envoyhost.Config) { c.Clock = clock }))
	}
	held := func(p *envoyhost.Plugin) int64 { // what the proxy was granted and has neither spent nor dropped
		return hostCounter(p, "meshlimit.rule.tenant.leased") - hostCounter(p, "meshlimit.rule.tenant.lease_spent") -
			hostCounter(p, "meshlimit.rule.tenant.lease_expired") // as its own ticks flushed them

	}
	var maxHeld, maxTotal int64
	for step := range steps { // each worker sends a request every 5 ms: a batch lasts longer than a tick
		if step%5 == 0 {
			for _, w := range workers {
				roundTrip(t, w.VM(0), get("api.example", "/", "192.0.2.1", [2]string{"x-tenant", "acme"}))
			}
		}
		clock.Advance(time.Millisecond)
		if step%10 == 9 { // a tick fired: let its lease land before time moves on
			settle(t, workers...)
		}
		maxHeld = max(maxHeld, held(workers[0]), held(workers[1]))
		maxTotal = max(maxTotal, held(workers[0])+held(workers[1]))
	}
	assert.Less(t, maxHeld, int64(2*batch), "a proxy leases only while it holds less than a batch, one lease at a time")
	t.Logf("most units one proxy held: %d (bound < %d); both proxies: %d (bound < %d); %d lease calls",
		maxHeld, 2*batch, maxTotal, 2*2*batch, sum(workers[:2], "meshlimit.global.lease_calls"))
}
