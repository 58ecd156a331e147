package e2e

import (
	"os"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/internal/envoyhost"
)

// TestVMsOfAnEarlierBuildAndOfThisOneOnOneKeyAdmitExactlyTheCapacity is a rollout on one host: four
// worker VMs of an earlier build of the module and four of this one share the vm_id's shared data
// and one key, their shared-data calls yielding so that CAS races are lost, the clock frozen, and
// (each VM's first request in turn, the rest racing) admit exactly the capacity between them: both builds read and write the same records (the record
// edited in place keeps the format). The earlier module is the file MESHLIMIT_PREVIOUS_WASM names
// (say the previous release's build/meshlimit.wasm); the test is skipped without it.
func TestVMsOfAnEarlierBuildAndOfThisOneOnOneKeyAdmitExactlyTheCapacity(t *testing.T) {
	prev := os.Getenv("MESHLIMIT_PREVIOUS_WASM")
	if prev == "" {
		t.Skip("MESHLIMIT_PREVIOUS_WASM names no earlier build of the module")
	}
	earlier, err := os.ReadFile(prev)
	require.NoError(t, err)
	tests := []struct {
		name     string
		limits   string
		capacity int64
	}{
		{"one token bucket", `[{"rate":"100/h"}]`, 100},
		{"eight limits of three kinds", `[{"rate":"150/h"},{"rate":"1000/d"},{"rate":"120/h","algorithm":"fixed_window"},` +
			`{"rate":"130/h","algorithm":"sliding_window"},{"rate":"100/d","burst":90},{"rate":"500/h","burst":200},` +
			`{"rate":"140/h","algorithm":"fixed_window"},{"rate":"1000000000000/d"}]`, 90},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			const perBuild, perWorker = 4, 40
			proc := envoyhost.NewProcess()
			proc.YieldOnSharedData()
			cfg := `{"rules":[{"name":"hot","key":[{"constant":"all"}],"limits":` + tc.limits + `}]}`
			builds := []*envoyhost.Plugin{
				load(t, earlier, cfg, perBuild, func(c *envoyhost.Config) { c.Process = proc }),
				load(t, module(t, "meshlimit"), cfg, perBuild, func(c *envoyhost.Config) { c.Process = proc }),
			}
			var admitted [2]atomic.Int64
			// Every VM's first request goes one after the other, so that both builds admit some
			// whatever order the scheduler runs the workers in; the rest race.
			for b, p := range builds {
				for w := range perBuild {
					if res := roundTrip(t, p.VM(w), get("a.example", "/", "192.0.2.1")); res.LocalReply == nil {
						admitted[b].Add(1)
					}
				}
			}
			var wg sync.WaitGroup
			for b, p := range builds {
				for w := range perBuild {
					vm := p.VM(w)
					wg.Add(1)
					go func() {
						defer wg.Done()
						for range perWorker - 1 {
							if res := roundTrip(t, vm, get("a.example", "/", "192.0.2.1")); res.LocalReply == nil {
								admitted[b].Add(1)
							}
						}
					}()
				}
			}
			wg.Wait()
			assert.Equal(t, tc.capacity, admitted[0].Load()+admitted[1].Load(), "not one more, not one less")
			assert.Positive(t, admitted[1].Load(), "this build admitted some")
			assert.Positive(t, admitted[0].Load(), "the earlier build admitted some")
			for _, p := range builds {
				assert.Zero(t, counter(p, "meshlimit.rule.hot.cas_exhausted"))
				for _, vm := range p.VMs() {
					assert.NoError(t, vm.Failed())
				}
			}
		})
	}
}
