package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/meshlimit/meshlimit/internal/envoyhost"
)

// BenchmarkStreamChunk is the lifecycle of a long stream's body: one chunk of N gRPC messages
// (16 payload bytes each) delivered to an open bidirectional stream, on the wazero host. The cases:
// the pass-through floor, meshlimit with a request rule (the chunk is not read), and meshlimit with
// a message rule (the chunk is read, framed and its N messages charged in one shared-data
// update). The per-message cost is (message − request rule) / N. A stream is replaced every
// streamChunks chunks, outside the timer, so the host's copy of the upstream body stays small.
func BenchmarkStreamChunk(b *testing.B) {
	cases := []struct{ name, module, config string }{
		{"floor", "passthrough", `{}`},
		{"request-rule", "meshlimit", `{"rules":[{"name":"chat","key":[{"header":"x-user"}],"limits":[{"rate":"1000000000/s"}]}]}`},
		{"message-rule", "meshlimit", messageRuleAt("1000000000/s")},
	}
	for _, n := range []int{1, 16, 256} {
		var chunk []byte
		for range n {
			chunk = append(chunk, grpcMessage(16)...)
		}
		for _, c := range cases {
			b.Run(fmt.Sprintf("%s/messages=%d", c.name, n), func(b *testing.B) {
				p := load(b, module(b, c.module), c.config, 1)
				vm := p.VM(0)
				const streamChunks = 256
				var s *envoyhost.Stream
				open := func() {
					if s != nil {
						_ = s.Close()
					}
					s = openBenchStream(b, vm)
				}
				open()
				calls0, allocs0 := vm.HostCalls()
				chunks := 0
				for b.Loop() {
					if chunks%streamChunks == streamChunks-1 {
						b.StopTimer()
						open()
						b.StartTimer()
					}
					if _, err := s.SendRequestBody(chunk, false); err != nil {
						b.Fatal(err)
					}
					chunks++
				}
				b.StopTimer()
				calls, allocs := vm.HostCalls()
				b.ReportMetric(float64(calls-calls0)/float64(chunks), "hostcalls/chunk")
				b.ReportMetric(float64(allocs-allocs0)/float64(chunks), "guestallocs/chunk")
				if err := vm.Failed(); err != nil {
					b.Fatal(err)
				}
			})
		}
	}
}

func messageRuleAt(rate string) string {
	return `{"rules":[{"name":"chat","key":[{"header":"x-user"}],"limits":[{"rate":"` + rate + `"}],"messages":{"direction":"request"}}]}`
}

// openBenchStream opens a gRPC stream whose server answered headers, for a benchmark.
func openBenchStream(b *testing.B, vm *envoyhost.VM) *envoyhost.Stream {
	req := grpcStream("ann")
	s := vm.NewStream(req.Info)
	if _, err := s.SendRequestHeaders(req.Headers, false); err != nil {
		b.Fatal(err)
	}
	if _, err := s.SendResponseHeaders(envoyhost.Headers{{":status", "200"}, {"content-type", "application/grpc"}}, false); err != nil {
		b.Fatal(err)
	}
	return s
}

// BenchmarkStreamChunkOnV8 is BenchmarkStreamChunk on the V8 host (v8host/chunks.js): the same
// cases and chunks, in CPU time per chunk (medians of 40 batches of 256 chunks per iteration).
func BenchmarkStreamChunkOnV8(b *testing.B) {
	node, err := exec.LookPath("node")
	if err != nil {
		b.Fatal("node is not installed (apt-get install nodejs): the chunk figures on V8 need it")
	}
	build := filepath.Join("..", "build")
	args := append(append([]string(nil), v8Flags...), filepath.Join("v8host", "main.js"), "chunks",
		filepath.Join(build, "passthrough.wasm"), filepath.Join(build, "meshlimit.wasm"), strconv.Itoa(40*b.N), "256")
	var stderr bytes.Buffer
	cmd := exec.Command(node, args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		b.Fatalf("v8host chunks: %v: %s", err, stderr.String())
	}
	var res struct {
		Cases []struct {
			Name        string  `json:"name"`
			CPUNs       float64 `json:"cpu_ns"`
			HostCalls   float64 `json:"hostcalls"`
			GuestAllocs float64 `json:"guestallocs"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(out, &res); err != nil || len(res.Cases) != 9 {
		b.Fatalf("v8host chunks: %v: %s", err, out)
	}
	b.StopTimer()
	for _, c := range res.Cases {
		b.ReportMetric(c.CPUNs, c.Name+"-cpu-ns/chunk")
		b.ReportMetric(c.HostCalls, c.Name+"-hostcalls/chunk")
	}
}
