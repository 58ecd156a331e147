package e2e

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/internal/envoyhost"
)

// bufferingCases are the cases of the buffering memory benchmark: streams left open at the point
// where each holds the most it ever holds, with max_body at its default (64 KiB).
var bufferingCases = []struct {
	short, config string
	open          func(testing.TB, *envoyhost.VM) *envoyhost.Stream
}{
	// floor: a rule that reads no body; the response has sent 64 KiB of its body.
	{"floor", bufferingRule(""), func(tb testing.TB, vm *envoyhost.VM) *envoyhost.Stream {
		return openResponding(tb, vm, "application/json", bytes.Repeat([]byte("j"), 64*kib))
	}},
	// json: a response settled from a JSON field has sent max_body bytes, all copied and kept.
	{"json", settlingJSON, func(tb testing.TB, vm *envoyhost.VM) *envoyhost.Stream {
		return openResponding(tb, vm, "application/json", bytes.Repeat([]byte("j"), 64*kib))
	}},
	// sse: an event stream's worst case: an event whose data lines hold just under max_body and
	// whose line in progress holds just under max_body more.
	{"sse", settlingJSON, func(tb testing.TB, vm *envoyhost.VM) *envoyhost.Stream {
		return openResponding(tb, vm, "text/event-stream", worstEvent(64*kib))
	}},
	// request: a request reserving from its JSON body has sent max_body bytes, held by the host.
	{"request", bufferingRule(`, "cost": {"request_json": "max_tokens", "default": 500, "max": 4000}`),
		func(tb testing.TB, vm *envoyhost.VM) *envoyhost.Stream {
			s := openPost(tb, vm, "application/json")
			for _, act := range sendChunks(tb, s.SendRequestBody, bytes.Repeat([]byte(" "), 64*kib), 16*kib, false) {
				require.Equal(tb, envoyhost.ActionPause, act, "the filter holds the body")
			}
			return s
		}},
}

// settlingJSON reserves a constant and settles from the response's usage.total_tokens.
var settlingJSON = bufferingRule(`, "cost": {"default": 10, "max": 4000, "settle": {"response_json": "usage.total_tokens"}}`)

// openResponding opens a stream whose request ended with its headers and whose response has sent
// body, in chunks of 16 KiB, without ending.
func openResponding(tb testing.TB, vm *envoyhost.VM, contentType string, body []byte) *envoyhost.Stream {
	s := vm.NewStream(envoyhost.StreamInfo{SourceAddress: "10.0.0.1:40000"})
	act, err := s.SendRequestHeaders(envoyhost.Headers{{":method", "GET"}, {":path", "/"}, {":authority", "a.test"},
		{":scheme", "http"}, {"x-user", "alice"}}, true)
	require.NoError(tb, err)
	require.Equal(tb, envoyhost.ActionContinue, act)
	_, err = s.SendResponseHeaders(envoyhost.Headers{{":status", "200"}, {"content-type", contentType}}, false)
	require.NoError(tb, err)
	for _, act := range sendChunks(tb, s.SendResponseBody, body, 16*kib, false) {
		require.Equal(tb, envoyhost.ActionContinue, act)
	}
	return s
}

// worstEvent is the start of an event stream whose first event keeps the most an SSE parser with
// limit bytes keeps: data lines of just under limit in all, then a line in progress just under limit.
func worstEvent(limit int) []byte {
	var b bytes.Buffer
	line := strings.Repeat("d", 1000)
	for n := 0; n+2*(len(line)+1) < limit; n += len(line) + 1 {
		b.WriteString("data: " + line + "\n")
	}
	b.WriteString("data: " + strings.Repeat("p", limit-16))
	return b.Bytes()
}

// bufferingGrowth opens n streams of case c on a fresh plugin and returns how much the VM's linear
// memory grew, per stream, over the memory after a first stream of the case (closed) warmed it.
func bufferingGrowth(b *testing.B, c int, n int) float64 {
	tc := bufferingCases[c]
	p := load(b, module(b, "meshlimit"), tc.config, 1)
	defer p.Close()
	vm := p.VM(0)
	require.NoError(b, tc.open(b, vm).Close())
	before := vm.MemoryBytes()
	streams := make([]*envoyhost.Stream, n)
	for i := range streams {
		streams[i] = tc.open(b, vm)
	}
	after := vm.MemoryBytes()
	for _, s := range streams {
		require.NoError(b, s.Close())
	}
	require.NoError(b, vm.Failed())
	return float64(after-before) / float64(n)
}

// BenchmarkBufferingMemory measures the memory bound of buffering: n streams (100, 1,000) open at
// once on one VM, each at the point where it holds the most (bufferingCases), and reports the growth
// of the VM's linear memory per stream, per case (the median over the iterations; the cases take
// turns in each iteration), with its excess over the floor. Linear memory never shrinks and grows as
// the guest's Go heap does (in steps, with the collector's headroom), so it is what the process
// pays: the guest's heap itself is not visible to the host. `make bench-buffering` runs it.
func BenchmarkBufferingMemory(b *testing.B) {
	for _, n := range []int{100, 1000} {
		b.Run(fmt.Sprintf("streams=%d", n), func(b *testing.B) {
			growth := make([][]float64, len(bufferingCases))
			for b.Loop() {
				for c := range bufferingCases {
					growth[c] = append(growth[c], bufferingGrowth(b, c, n))
				}
			}
			b.StopTimer()
			floor := median(growth[0])
			for c, tc := range bufferingCases {
				m := median(growth[c])
				b.ReportMetric(m, tc.short+"-guest-bytes/stream")
				if c > 0 {
					b.ReportMetric(m-floor, tc.short+"-over-floor-bytes/stream")
				}
			}
		})
	}
}

// median returns the median of vs (the upper one of an even count).
func median(vs []float64) float64 {
	s := slices.Clone(vs)
	slices.Sort(s)
	return s[len(s)/2]
}
