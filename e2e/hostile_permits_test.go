package e2e

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/internal/envoyhost"
)

// Issue 20, findings 6 and 7: permits and shed slots across more workers than an owned record has
// entries, and concurrency slots held by idle streams with minted keys (docs/threat-model.md).

// holdOnEveryVM opens rounds streams on each of vms in turn and holds them all; it returns how
// many the filter let through.
func holdOnEveryVM(t *testing.T, vms []*envoyhost.VM, rounds int, req func() *envoyhost.Request) int {
	t.Helper()
	admitted := 0
	for range rounds {
		for _, vm := range vms {
			if _, ok := openStream(t, vm, req()); ok {
				admitted++
			}
		}
	}
	return admitted
}

func TestAHundredWorkersNeverHoldMoreThanAConcurrencyLimitOf70(t *testing.T) {
	p := load(t, module(t, "meshlimit"), concConfig("70"), 100)
	admitted := holdOnEveryVM(t, p.VMs()[:100], 2, func() *envoyhost.Request { return tenant("acme") })
	assert.Equal(t, 70, admitted, "every permit is counted, however many workers hold one")
	assert.Equal(t, int64(70), counter(p, "meshlimit.rule.gpu.allowed"))
	assert.Equal(t, int64(130), counter(p, "meshlimit.rule.gpu.limited"))
}

func TestAHundredWorkersNeverHoldMoreThanAShedCapacityOf70(t *testing.T) {
	cfg := `{"rules":[{"name":"all","limits":[{"rate":"1000000/s"}]}],
		"shed":{"capacity":70,"classes":[{"name":"only"}],"default_class":"only"}}`
	p := load(t, module(t, "meshlimit"), cfg, 100)
	admitted := holdOnEveryVM(t, p.VMs()[:100], 2, func() *envoyhost.Request { return classed("only") })
	assert.Equal(t, 70, admitted, "every slot is counted, however many workers hold one")
	require.Equal(t, int64(130), counter(p, "meshlimit.shed.only.shed"))
}

// mintedTenants opens n streams from one address, each with a fresh tenant (numbered from first),
// held for ever; it returns how many the filter let through.
func mintedTenants(t *testing.T, p *envoyhost.Plugin, first, n int) int {
	admitted := 0
	for i := range n {
		req := get("api.example", "/v1/generate", "203.0.113.66", [2]string{"x-tenant", "minted-" + strconv.Itoa(first+i)})
		if _, ok := openStream(t, p.VM(i%2), req); ok {
			admitted++
		}
	}
	return admitted
}

// newcomers opens one stream for each of n new tenants, each from its own address, and returns how
// many were admitted.
func newcomers(t *testing.T, p *envoyhost.Plugin, n int) int {
	admitted := 0
	for i := range n {
		req := get("api.example", "/v1/generate", "192.0.2."+strconv.Itoa(i+1), [2]string{"x-tenant", "new-" + strconv.Itoa(i)})
		if _, ok := openStream(t, p.VM(i%2), req); ok {
			admitted++
		}
	}
	return admitted
}

func TestIdleStreamsWithMintedTenantsCannotDenyNewTenantsWhileTheOverflowPoolHasRoom(t *testing.T) {
	cfg := `{"rules":[{"name":"gpu","key":[{"header":"x-tenant"}],"max_keys":100,
		"limits":[{"concurrency":3}],"overflow":[{"concurrency":500}]}]}`
	p := load(t, module(t, "meshlimit"), cfg, 2)
	require.Equal(t, 300, mintedTenants(t, p, 0, 300), "three times max_keys of minted tenants, one stream each")
	p.Clock().Advance(5 * time.Minute) // renewals keep every permit
	assert.Equal(t, 100, newcomers(t, p, 100), "the newcomers without room share the overflow pool of 500")
	// The table holds at most 100 and the pool 500: of 300 more, at least 100 are denied.
	assert.LessOrEqual(t, mintedTenants(t, p, 300, 300), 200, "the pool is a bound: past it, newcomers are denied")
}

func TestAPerIPConcurrencyRuleBeforeAPerTenantOneStopsMintedTenantsFromOneAddress(t *testing.T) {
	cfg := `{"rules":[{"name":"per-ip","key":["client_ip"],"limits":[{"concurrency":20}]},
		{"name":"gpu","key":[{"header":"x-tenant"}],"max_keys":500,"limits":[{"concurrency":3}]}]}`
	p := load(t, module(t, "meshlimit"), cfg, 2)
	assert.Equal(t, 20, mintedTenants(t, p, 0, 1000), "one address holds its 20 permits, whatever tenants it names")
	p.Clock().Advance(5 * time.Minute)
	assert.Equal(t, 100, newcomers(t, p, 100), "every new tenant is admitted")
}

func TestRenewalsKeepCountingEveryPermitOfTheKeysThatShareTheOverflowPool(t *testing.T) {
	cfg := `{"rules":[{"name":"gpu","key":[{"header":"x-tenant"}],"max_keys":10,"limits":[{"concurrency":3}]}]}`
	p := load(t, module(t, "meshlimit"), cfg, 2)
	// One stream per minted tenant: the table's keys hold at most one each, the keys without
	// room share one pool of 3, so at most 10 + 3 are ever in flight.
	admitted := mintedTenants(t, p, 0, 40)
	require.LessOrEqual(t, admitted, 13)
	p.Clock().Advance(3 * time.Second) // a renewal
	admitted += mintedTenants(t, p, 40, 40)
	assert.LessOrEqual(t, admitted, 13, "the pool's permits are still counted after a renewal")
}

// Review 20, finding 7: a plugin's workers past the record's own entries count in its shared
// entry; the plugin that replaces it joins the shared entry and keeps using it. What the dead
// plugin held there expires with its generation, as its own entries do with their lease.
func TestPermitsADeadPluginHeldInTheSharedEntryAreReclaimed(t *testing.T) {
	proc := envoyhost.NewProcess()
	clock := envoyhost.NewClock(epoch)
	opt := func(c *envoyhost.Config) { c.Process = proc; c.Clock = clock }
	a := load(t, module(t, "meshlimit"), concConfig("200"), 100, opt)
	require.Equal(t, 100, holdOnEveryVM(t, a.VMs()[:100], 1, func() *envoyhost.Request { return tenant("acme") }))
	b := load(t, module(t, "meshlimit"), concConfig("200"), 100, opt) // a reconfiguration
	require.Equal(t, 100, holdOnEveryVM(t, b.VMs()[:100], 1, func() *envoyhost.Request { return tenant("acme") }),
		"A's 62 entries of their own and its shared requests leave B only the shared entry")
	require.NoError(t, a.Close()) // A's workers die holding their 100 permits
	for range 20 {
		clock.Advance(time.Second) // B's ticks renew its permits; A's lapse
	}
	assert.Equal(t, 100, holdOnEveryVM(t, b.VMs()[:100], 2, func() *envoyhost.Request { return tenant("acme") }),
		"every permit of the dead plugin is reclaimed, those in the shared entry too")
	assert.Equal(t, 0, holdOnEveryVM(t, b.VMs()[:100], 1, func() *envoyhost.Request { return tenant("acme") }),
		"B holds the limit of 200: not one more")
	for range 300 {
		clock.Advance(time.Second)
	}
	assert.Equal(t, 0, holdOnEveryVM(t, b.VMs()[:100], 1, func() *envoyhost.Request { return tenant("acme") }),
		"renewed for 5 minutes, B's 200 permits, in its entries and in the shared entry, are all still counted")
}

func TestShedSlotsADeadPluginHeldInTheSharedEntryAreReclaimed(t *testing.T) {
	cfg := `{"rules":[{"name":"all","limits":[{"rate":"1000000/s"}]}],
		"shed":{"capacity":200,"classes":[{"name":"only"}],"default_class":"only"}}`
	proc := envoyhost.NewProcess()
	clock := envoyhost.NewClock(epoch)
	opt := func(c *envoyhost.Config) { c.Process = proc; c.Clock = clock }
	a := load(t, module(t, "meshlimit"), cfg, 100, opt)
	require.Equal(t, 100, holdOnEveryVM(t, a.VMs()[:100], 1, func() *envoyhost.Request { return classed("only") }))
	b := load(t, module(t, "meshlimit"), cfg, 100, opt)
	require.Equal(t, 100, holdOnEveryVM(t, b.VMs()[:100], 1, func() *envoyhost.Request { return classed("only") }))
	require.NoError(t, a.Close())
	for range 20 {
		clock.Advance(time.Second)
	}
	assert.Equal(t, 100, holdOnEveryVM(t, b.VMs()[:100], 2, func() *envoyhost.Request { return classed("only") }),
		"every slot of the dead plugin is reclaimed, those in the shared entry too")
	for range 300 {
		clock.Advance(time.Second)
	}
	assert.Equal(t, 0, holdOnEveryVM(t, b.VMs()[:100], 1, func() *envoyhost.Request { return classed("only") }),
		"renewed for 5 minutes, B's 200 slots are all still counted")
}

func TestKeyShareSlotsADeadPluginHeldInTheSharedEntryAreReclaimed(t *testing.T) {
	cfg := `{"rules":[{"name":"all","limits":[{"rate":"1000000/s"}]}],
		"shed":{"capacity":1000,"key_share":200}}`
	proc := envoyhost.NewProcess()
	clock := envoyhost.NewClock(epoch)
	opt := func(c *envoyhost.Config) { c.Process = proc; c.Clock = clock }
	one := func() *envoyhost.Request { return get("api.example", "/upload", "198.51.100.66") } // one address: 200 slots
	a := load(t, module(t, "meshlimit"), cfg, 100, opt)
	require.Equal(t, 100, holdOnEveryVM(t, a.VMs()[:100], 1, one))
	b := load(t, module(t, "meshlimit"), cfg, 100, opt)
	require.Equal(t, 100, holdOnEveryVM(t, b.VMs()[:100], 1, one))
	require.NoError(t, a.Close())
	for range 20 {
		clock.Advance(time.Second)
	}
	assert.Equal(t, 100, holdOnEveryVM(t, b.VMs()[:100], 2, one),
		"every key share slot of the dead plugin is reclaimed, those in the shared entry too")
	for range 300 {
		clock.Advance(time.Second)
	}
	assert.Equal(t, 0, holdOnEveryVM(t, b.VMs()[:100], 1, one), "renewed for 5 minutes, B's 200 slots are all still counted")
}
