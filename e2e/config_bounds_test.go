package e2e

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// boundsConfig is one rule keyed on x-user with n overrides, each of limits limits (the rule's own
// has as many), every override's limits alike except its quota, which takes one of distinct values.
func boundsConfig(n, limits, distinct int) string {
	var b strings.Builder
	lims := func(q int) {
		b.WriteString(`[`)
		for j := range limits {
			if j > 0 {
				b.WriteString(`,`)
			}
			b.WriteString(`{"rate":"`)
			b.WriteString(strconv.Itoa(q + j))
			b.WriteString(`/s"}`)
		}
		b.WriteString(`]`)
	}
	b.WriteString(`{"rules":[{"name":"per-user","key":[{"header":"x-user"}],"limits":`)
	lims(1)
	b.WriteString(`,"overrides":[`)
	for i := range n {
		if i > 0 {
			b.WriteString(`,`)
		}
		b.WriteString(`{"value":"user-`)
		b.WriteString(strconv.Itoa(i))
		b.WriteString(`","limits":`)
		lims(100 + i%distinct)
		b.WriteString(`}`)
	}
	b.WriteString(`]}]}`)
	return b.String()
}

// BenchmarkConfigureMemory reports a VM's linear memory once it has started with n overrides of 1 and
// of 8 limits: guest-MiB (what the VM holds for good: wasm memory never shrinks), and the bytes it
// takes per override. A figure, never asserted (docs/configuration.md "Bounds" reports it).
func BenchmarkConfigureMemory(b *testing.B) {
	wasm := module(b, "meshlimit")
	base := load(b, wasm, boundsConfig(1, 1, 1), 0).VM(0).MemoryBytes()
	for _, c := range []struct{ n, limits, distinct int }{
		{10_000, 1, 1}, {10_000, 8, 1}, {10_000, 8, 10_000}, {12_500, 8, 12_500}, {100_000, 1, 100_000}, {100_000, 8, 4},
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

var _ = assert.Equal
var _ = context.Background
