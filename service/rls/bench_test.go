package rls

import (
	"context"
	"fmt"
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/meshlimit/meshlimit/service"
	"github.com/meshlimit/meshlimit/service/memstore"
	"github.com/meshlimit/meshlimit/service/rlsconfig"
)

// BenchmarkDecide measures the decision path without the network: match, count in the
// memory store, answer (and, with metrics, count).
func BenchmarkDecide(b *testing.B) {
	rules := goodRules(b)
	store := memstore.New(memstore.Config{SweepInterval: -1})
	defer store.Close()
	reqs := make([]*pb.RateLimitRequest, 1024)
	for i := range reqs {
		reqs[i] = req("edge_proxy_per_ip", desc("remote_address", fmt.Sprintf("10.0.%d.%d", i/256, i%256)))
	}
	for _, withMetrics := range []bool{false, true} {
		b.Run(fmt.Sprintf("metrics=%v", withMetrics), func(b *testing.B) {
			cfg := Config{Store: store, Rules: func() *rlsconfig.Config { return rules }, Now: func() time.Time { return minuteStart }}
			if withMetrics {
				cfg.Metrics = NewMetrics(service.NewMetrics())
			}
			s, err := NewServer(cfg)
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if _, err := s.ShouldRateLimit(ctx, reqs[i%len(reqs)]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
