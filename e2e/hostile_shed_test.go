package e2e

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/internal/envoyhost"
)

// Issue 20, findings 1, 2, 6 and 7: a client that plays the shedder, the permits and the
// concurrency slots gets no more than the documented bounds (docs/threat-model.md).

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
