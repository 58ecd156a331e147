package envoyhost_test

import (
	"context"
	"testing"

	"github.com/meshlimit/meshlimit/internal/envoyhost"
)

// BenchmarkRoundTripPassThrough measures one whole request lifecycle (context create,
// request headers, response headers, log, done, delete) through the test guest's
// pass-through path: the host's floor.
func BenchmarkRoundTripPassThrough(b *testing.B) {
	p := newPlugin(b, "guest", envoyhost.Config{LogLevel: envoyhost.LogCritical})
	vm := p.VM(0)
	req := &envoyhost.Request{Headers: op("")}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		res, err := vm.RoundTrip(ctx, req, ok200)
		if err != nil || res.LocalReply != nil {
			b.Fatalf("RoundTrip = %+v, %v", res, err)
		}
	}
}
