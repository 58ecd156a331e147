package rls

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

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
// `go test -bench DecideOnRedis -cpuprofile` or the load test's. MESHLIMIT_BENCH_REDIS
// (host:port) names an external redis-server, for callgrind.
func BenchmarkDecideOnRedis(b *testing.B) {
	store, rules := benchRedisStore(b)
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

// BenchmarkGRPCCallOnRedis measures what the gRPC front does for a call but the transport: it
// decodes the request's bytes with the server's codec, decides them on a real redis-server with
// the metrics on, and encodes the answer, with 1 and 16 descriptors; codec=proto is gRPC's own
// codec, for comparison. One call at a time (MESHLIMIT_BENCH_REDIS as for
// BenchmarkDecideOnRedis): the CPU of one call is mostly the wait for its round trip here, so the
// Go side's instructions are BenchmarkGRPCCall's.
func BenchmarkGRPCCallOnRedis(b *testing.B) {
	store, rules := benchRedisStore(b)
	benchGRPCCall(b, store, rules)
}

// BenchmarkGRPCCall is BenchmarkGRPCCallOnRedis on the memory store: no wait, so its
// instruction count per call (callgrind, two -benchtime counts) is the Go side's own work,
// transport and store I/O aside.
func BenchmarkGRPCCall(b *testing.B) {
	store := memstore.New(memstore.Config{SweepInterval: -1})
	b.Cleanup(func() { store.Close() })
	benchGRPCCall(b, store, benchRules(b))
}

func benchGRPCCall(b *testing.B, store service.Store, rules *rlsconfig.Config) {
	s, err := NewServer(Config{Store: store, Timeout: time.Minute, Rules: func() *rlsconfig.Config { return rules },
		Metrics: NewMetrics(service.NewMetrics())})
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range []int{1, 16} {
		raw := make([][]byte, 1024)
		for i, r := range benchRequests(n)[:len(raw)] {
			if raw[i], err = proto.Marshal(r); err != nil {
				b.Fatal(err)
			}
		}
		for _, name := range []string{"server", grpcproto.Name} {
			codec := encoding.CodecV2(newRequestCodec())
			if name == grpcproto.Name {
				codec = encoding.GetCodecV2(grpcproto.Name)
			}
			b.Run(fmt.Sprintf("descriptors=%d/codec=%s", n, name), func(b *testing.B) {
				ctx := context.Background()
				b.ReportAllocs()
				for i := 0; b.Loop(); i++ {
					r := new(pb.RateLimitRequest)
					if err := codec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(raw[i%len(raw)])}, r); err != nil {
						b.Fatal(err)
					}
					resp, err := s.ShouldRateLimit(ctx, r)
					if err != nil || len(resp.GetStatuses()) != n {
						b.Fatal(err, resp)
					}
					out, err := codec.Marshal(resp)
					if err != nil {
						b.Fatal(err)
					}
					out.Free()
				}
			})
		}
	}
}

// benchRedisStore is a Redis store on MESHLIMIT_BENCH_REDIS (its counters of a past run expire
// within two seconds) or a redis-server of its own, and benchRules.
func benchRedisStore(b *testing.B) (*redisstore.Store, *rlsconfig.Config) {
	addr := os.Getenv("MESHLIMIT_BENCH_REDIS")
	if addr == "" {
		addr = redistest.Start(b).Addr()
	}
	store, err := redisstore.New(redisstore.Config{Addrs: []string{addr}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { store.Close() })
	return store, benchRules(b)
}

// benchRules is one rule of 10^9 a second per remote_address (every call passes).
func benchRules(b *testing.B) *rlsconfig.Config {
	rules, err := rlsconfig.Load([]rlsconfig.File{{Name: "bench.yaml", Data: []byte(
		"domain: bench\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: second, requests_per_unit: 1000000000}\n")}})
	if err != nil {
		b.Fatal(err)
	}
	return rules
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
