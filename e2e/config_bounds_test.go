package e2e

import (
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Findings of cfg22: a configuration within the documented bounds of overrides (100000 in the
// configuration), of the limits they write (200000) and of their distinct limits (100000) starts, and what a VM holds for it is
// measured (BenchmarkConfigureMemory; docs/configuration.md "Memory per override").

// boundsConfig is one rule keyed on x-user (its own limits 1000/s...) with n overrides, user-0,
// user-1, ..., of limits limits each: override i's first limit is 1+i%distinct/s and its others
// looser, so there are distinct distinct lists, and user-i and user-(i+distinct) share one.
func boundsConfig(n, limits, distinct int) string {
	var b strings.Builder
	lims := func(q int) {
		b.WriteString(`[`)
		for j := range limits {
			if j > 0 {
				b.WriteString(`,`)
			}
			b.WriteString(`{"rate":"` + strconv.Itoa(q+j*distinct) + `/s"}`)
		}
		b.WriteString(`]`)
	}
	b.WriteString(`{"rules":[{"name":"per-user","key":[{"header":"x-user"}],"limits":`)
	lims(1000)
	b.WriteString(`,"overrides":[`)
	for i := range n {
		if i > 0 {
			b.WriteString(`,`)
		}
		b.WriteString(`{"value":"user-` + strconv.Itoa(i) + `","limits":`)
		lims(1 + i%distinct)
		b.WriteString(`}`)
	}
	b.WriteString(`]}]}`)
	return b.String()
}

func asUser(user string) [2]string { return [2]string{"x-user", user} }

func TestAConfigurationAtTheBoundsOfOverridesAndLimitsStarts(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a configuration of 100000 overrides: minutes under wazero on a loaded machine")
	}
	wasm := module(t, "meshlimit")
	for _, c := range []struct {
		name                string
		n, limits, distinct int
	}{
		// The most a VM holds at the bounds (257 MiB); 12,500 overrides of 8 distinct limits
		// (143 MiB) and 100,000 of 2 limits in 4 tiers (239 MiB) hold less and are measured by
		// BenchmarkConfigureMemory, to keep make test's e2e stage within its minutes.
		{"100000 overrides of one distinct limit each", 100_000, 1, 100_000},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := boundsConfig(c.n, c.limits, c.distinct)
			p := load(t, wasm, cfg, 0)
			vm := p.VM(0)
			require.NoError(t, vm.Failed())
			t.Logf("%s (%d KiB of JSON): the VM holds %d MiB", c.name, len(cfg)>>10, vm.MemoryBytes()>>20)
			first := get("api.example", "/", "203.0.113.7", asUser("user-0"))
			assert.Equal(t, 200, status(roundTrip(t, vm, first)), "user-0's limit is 1/s")
			assert.Equal(t, 429, status(roundTrip(t, vm, first)), "and its override decides it")
			last := get("api.example", "/", "203.0.113.7", asUser("user-"+strconv.Itoa(c.n-1)))
			assert.Equal(t, 200, status(roundTrip(t, vm, last)), "the last override is in place")
			if c.distinct < c.n {
				twin := get("api.example", "/", "203.0.113.7", asUser("user-"+strconv.Itoa(c.distinct)))
				assert.Equal(t, 200, status(roundTrip(t, vm, twin)), "an override that shares user-0's limits has its own bucket")
			}
			other := get("api.example", "/", "203.0.113.7", asUser("nobody"))
			for range 3 {
				assert.Equal(t, 200, status(roundTrip(t, vm, other)), "a key without an override has the rule's limits")
			}
		})
	}
}

// BenchmarkConfigureMemory reports a VM's linear memory once it has started with n overrides of
// limits limits in distinct lists: guest-MiB (what the VM holds for good: wasm memory never
// shrinks) and B/override over a configuration of one override. A figure, never asserted.
func BenchmarkConfigureMemory(b *testing.B) {
	wasm := module(b, "meshlimit")
	base := load(b, wasm, boundsConfig(1, 1, 1), 0).VM(0).MemoryBytes()
	for _, c := range []struct{ n, limits, distinct int }{
		{10_000, 1, 1}, {10_000, 8, 1}, {10_000, 8, 10_000}, {12_500, 8, 12_500}, {100_000, 1, 1}, {100_000, 1, 100_000}, {100_000, 2, 4}, {25_000, 8, 4},
	} {
		name := strconv.Itoa(c.n) + "x" + strconv.Itoa(c.limits) + "/distinct-" + strconv.Itoa(c.distinct)
		b.Run(name, func(b *testing.B) {
			cfg := boundsConfig(c.n, c.limits, c.distinct)
			var mem uint64
			for b.Loop() {
				p := load(b, wasm, cfg, 0)
				mem = p.VM(0).MemoryBytes()
				require.NoError(b, p.Close())
			}
			b.ReportMetric(float64(mem)/(1<<20), "guest-MiB")
			b.ReportMetric(float64(mem-base)/float64(c.n), "B/override")
			b.ReportMetric(float64(len(cfg))/(1<<20), "config-MiB")
		})
	}
}
