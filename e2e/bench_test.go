package e2e

import (
	"context"
	"testing"

	"github.com/meshlimit/meshlimit/internal/envoyhost"
)

// BenchmarkRequestLifecycle measures one whole request (context create, request headers, response
// headers, log, done, delete) through the pass-through module, the floor, and through meshlimit with a
// per-client-IP rule, side by side in one run so that their ratio means something on a noisy machine.
func BenchmarkRequestLifecycle(b *testing.B) {
	cases := []struct {
		name, module, config string
	}{
		{"passthrough", "passthrough", `{}`},
		{"meshlimit/allowed", "meshlimit", `{"rules":[{"name":"per-ip","key":["client_ip"],"limits":[{"rate":"1000000000/s"}]}]}`},
		{"meshlimit/allowed-no-quota-headers", "meshlimit", `{"rules":[{"name":"per-ip","key":["client_ip"],"limits":[{"rate":"1000000000/s"}]}],
			"response":{"quota_headers_on_allowed":false}}`},
		{"meshlimit/denied", "meshlimit", `{"rules":[{"name":"per-ip","key":["client_ip"],"limits":[{"rate":"1/h"}]}]}`},
		// A concurrency permit taken in the request headers and given back at the end of the stream.
		{"meshlimit/concurrency", "meshlimit", `{"rules":[{"name":"per-ip","key":["client_ip"],"limits":[{"concurrency":1000}]}]}`},
		// The rate rule and a shedding slot, taken and given back the same way.
		{"meshlimit/allowed-and-shed", "meshlimit", `{"rules":[{"name":"per-ip","key":["client_ip"],"limits":[{"rate":"1000000000/s"}]}],
			"shed":{"capacity":1000}}`},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			p := load(b, module(b, c.module), c.config, 1)
			vm := p.VM(0)
			req := get("bench.example", "/api/items?page=2", "203.0.113.77", [2]string{"user-agent", "bench"})
			ctx := context.Background()
			if _, err := vm.RoundTrip(ctx, req, ok200); err != nil { // warm up, and spend the 1/h quota
				b.Fatal(err)
			}
			calls0, allocs0 := vm.HostCalls()
			b.ReportAllocs()
			n := 0
			for b.Loop() {
				if _, err := vm.RoundTrip(ctx, req, ok200); err != nil {
					b.Fatal(err)
				}
				n++
			}
			b.StopTimer()
			calls, allocs := vm.HostCalls()
			b.ReportMetric(float64(calls-calls0)/float64(n), "hostcalls/op")
			b.ReportMetric(float64(allocs-allocs0)/float64(n), "guestallocs/op")
			if err := vm.Failed(); err != nil {
				b.Fatal(err)
			}
			reportGuestMemory(b, p)
		})
	}
}

// reportGuestMemory reports the guest's linear memory after the run: wasm memory never shrinks, so
// growth here is what a long-running Envoy would keep.
func reportGuestMemory(b *testing.B, p *envoyhost.Plugin) {
	b.ReportMetric(float64(p.VM(0).MemoryBytes())/(1<<20), "guest-MiB")
}
