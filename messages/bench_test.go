package messages

import (
	"strconv"
	"testing"
)

// grpcChunk is a chunk of n gRPC messages of size bytes each.
func grpcChunk(n, size int) []byte {
	var out []byte
	for range n {
		out = append(out, grpcMsg(0, string(make([]byte, size)))...)
	}
	return out
}

// wsChunk is a chunk of n masked client text frames of size bytes each.
func wsChunk(n, size int) []byte {
	var out []byte
	for range n {
		out = append(out, wsFrame(0x81, key, string(make([]byte, size)))...)
	}
	return out
}

// BenchmarkGRPCFeed measures one Feed of a chunk of N messages of 64 bytes (the cost per chunk
// the filter pays on each body callback; ns/msg is the cost per message).
func BenchmarkGRPCFeed(b *testing.B) {
	for _, n := range []int{1, 16, 256} {
		b.Run("messages="+strconv.Itoa(n), func(b *testing.B) {
			chunk := grpcChunk(n, 64)
			var g GRPC
			b.SetBytes(int64(len(chunk)))
			b.ReportAllocs()
			for b.Loop() {
				if got, err := g.Feed(chunk); got != n || err != nil {
					b.Fatal(got, err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/msg")
		})
	}
}

// BenchmarkWebSocketFeed measures one Feed of a chunk of N masked client frames of 64 bytes.
func BenchmarkWebSocketFeed(b *testing.B) {
	for _, n := range []int{1, 16, 256} {
		b.Run("messages="+strconv.Itoa(n), func(b *testing.B) {
			chunk := wsChunk(n, 64)
			w := WebSocket{FromClient: true}
			b.SetBytes(int64(len(chunk)))
			b.ReportAllocs()
			for b.Loop() {
				if got, err := w.Feed(chunk); got != n || err != nil {
					b.Fatal(got, err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/msg")
		})
	}
}

func TestFeedingAChunkAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	grpc, ws := grpcChunk(16, 40), wsChunk(16, 40)
	var g GRPC
	w := WebSocket{FromClient: true}
	assert0 := func(name string, f func()) {
		if n := testing.AllocsPerRun(200, f); n != 0 {
			t.Errorf("%s allocates %v times per chunk, want 0", name, n)
		}
	}
	assert0("GRPC.Feed", func() { _, _ = g.Feed(grpc) })
	assert0("WebSocket.Feed", func() { _, _ = w.Feed(ws) })
	bad := GRPC{}
	assert0("GRPC.Feed of a violation", func() { _, _ = bad.Feed([]byte{9}) })
	buf := make([]byte, 0, 200)
	assert0("AppendClose", func() { buf, _ = AppendClose(buf[:0], ClosePolicyViolation, "over the limit") })
}
