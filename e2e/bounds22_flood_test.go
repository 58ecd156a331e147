package e2e

import (
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/meshlimit/meshlimit/internal/redistest"
)

// bounds22Start starts the service under test (a22svcStart) with a gRPC front and the ratelimit
// domain "d", and returns its HTTP and gRPC addresses.
func bounds22Start(t *testing.T) (url, grpcAddr string) {
	t.Helper()
	r := redistest.Start(t)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(dir+"/d.yaml", []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: minute\n      requests_per_unit: 1000\n"), 0o600))
	grpcAddr = a22svcFreeAddr(t)
	return a22svcStart(t, r.Addr(), "-grpc-listen", grpcAddr, "-ratelimit-config", dir), grpcAddr
}

// bounds22EmptyDescriptors is a ShouldRateLimit message of domain "d" and empty descriptors, of
// at most size bytes.
func bounds22EmptyDescriptors(size int) []byte {
	b := protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), "d")
	for len(b)+2 <= size {
		b = append(b, 0x12, 0x00) // field 2 (descriptors), an empty message
	}
	return b
}

// Attack22 finding 3, the replica's side: one gRPC connection whose 128 streams send 256 KiB
// messages of 131,000 empty descriptors for 4 s. Each is refused from its wire bytes, so the
// replica holds what is in flight (128 x 256 KiB = 32 MiB) and the garbage collector's room
// for it, not 50 times it: heap in use peaks under 4 x 32 MiB (measured 55-70 MB; 434-557 MB
// before the fix, RSS 545-594 MB). A load run, bounded in time, so it runs only with
// MESHLIMIT_BOUNDS_FLOOD=1; ATTACK22_SERVICE names another binary to measure (a "before").
func TestOneConnectionOfStreamsPastTheBoundsDoesNotGrowTheReplica(t *testing.T) {
	if os.Getenv("MESHLIMIT_BOUNDS_FLOOD") == "" {
		t.Skip("a 4 s load run: MESHLIMIT_BOUNDS_FLOOD=1 runs it")
	}
	url, grpcAddr := bounds22Start(t)
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(a22rawCodec{})))
	require.NoError(t, err)
	defer conn.Close()
	const size = 256*1024 - 64
	msg := bounds22EmptyDescriptors(size)
	rss0 := a22svcMetric(t, url, "process_resident_memory_bytes")
	stop := time.Now().Add(4 * time.Second)
	var wg sync.WaitGroup
	var mu sync.Mutex
	calls := 0
	for range 128 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) {
				in, out := msg, []byte(nil)
				_ = conn.Invoke(t.Context(), "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", &in, &out)
				mu.Lock()
				calls++
				mu.Unlock()
			}
		}()
	}
	peak, heap := 0.0, 0.0
	for time.Now().Before(stop) {
		peak = max(peak, a22svcMetric(t, url, "process_resident_memory_bytes"))
		heap = max(heap, a22svcMetric(t, url, "go_memstats_heap_inuse_bytes"))
		time.Sleep(100 * time.Millisecond)
	}
	wg.Wait()
	peak = max(peak, a22svcMetric(t, url, "process_resident_memory_bytes"))
	t.Logf("calls %d; RSS before %.1f MB, peak %.1f MB; heap in use peak %.1f MB", calls, rss0/1e6, peak/1e6, heap/1e6)
	require.Less(t, heap, float64(4*128*size), "heap in use, bytes")
}
