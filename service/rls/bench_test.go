package rls

import (
	"context"
	"fmt"
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/meshlimit/meshlimit/internal/redistest"
	"github.com/meshlimit/meshlimit/service"
	"github.com/meshlimit/meshlimit/service/memstore"
	"github.com/meshlimit/meshlimit/service/redisstore"
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
			loopDecide(b, s, reqs)
		})
	}
}

// BenchmarkDynamicMetadata measures what the dynamic metadata adds to an answer: one
// descriptor whose rule has metadata ({team: payments, tags: [a, b]}), checked without
// charging so that it always passes.
func BenchmarkDynamicMetadata(b *testing.B) {
	rules := goodRules(b)
	store := memstore.New(memstore.Config{SweepInterval: -1})
	defer store.Close()
	r := req("units", withHits(desc("meta", "x"), 0))
	for _, dm := range []bool{false, true} {
		b.Run(fmt.Sprintf("dynamic_metadata=%v", dm), func(b *testing.B) {
			s, err := NewServer(Config{Store: store, DynamicMetadata: dm, Timeout: time.Minute, Rules: func() *rlsconfig.Config { return rules }, Now: func() time.Time { return minuteStart }})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				resp, err := s.ShouldRateLimit(ctx, r)
				if err != nil || dm != (resp.GetDynamicMetadata() != nil) {
					b.Fatal(err, resp)
				}
			}
		})
	}
}

// BenchmarkDecideOnRedis measures one ShouldRateLimit on a real redis-server, without gRPC,
// one call at a time, with 1 and 16 descriptors (each its own counter): the counts in one batch
// (one round trip), and with the store's batch hidden (a goroutine and a round trip per
// counter, as before the batch). ns/op is latency; the CPU figure is
// `go test -bench DecideOnRedis -cpuprofile` or the load test's.
func BenchmarkDecideOnRedis(b *testing.B) {
	rs := redistest.Start(b)
	store, err := redisstore.New(redisstore.Config{Addrs: []string{rs.Addr()}})
	if err != nil {
		b.Fatal(err)
	}
	defer store.Close()
	rules, err := rlsconfig.Load([]rlsconfig.File{{Name: "bench.yaml", Data: []byte(
		"domain: bench\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: second, requests_per_unit: 1000000000}\n")}})
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range []int{1, 16} {
		reqs := benchRequests(n)
		for _, batched := range []bool{true, false} {
			var st service.Store = store
			if !batched {
				st = struct{ service.Store }{store}
			}
			b.Run(fmt.Sprintf("descriptors=%d/batch=%v", n, batched), func(b *testing.B) {
				s, err := NewServer(Config{Store: st, Timeout: time.Second, Rules: func() *rlsconfig.Config { return rules }})
				if err != nil {
					b.Fatal(err)
				}
				loopDecide(b, s, reqs)
			})
		}
	}
}

// loopDecide decides reqs in turn, one per benchmark iteration, failing on the first error.
func loopDecide(b *testing.B, s *Server, reqs []*pb.RateLimitRequest) {
	ctx := context.Background()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if _, err := s.ShouldRateLimit(ctx, reqs[i%len(reqs)]); err != nil {
			b.Fatal(err)
		}
	}
}
