package e2e

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tetratelabs/wazero/experimental"

	"github.com/meshlimit/meshlimit/internal/envoyhost"
)

// A counted chunk of a long stream allocates nothing on the guest's heap once warm: the chunk
// lands in a buffer the limiter reuses (abi.GetBody), the framers are values in the stream's
// context, and the charge goes through the same reused buffers as a request's.
func TestAWarmStreamChunkAllocatesNothingOnTheGuestHeap(t *testing.T) {
	for _, tc := range []struct{ name, proto, block string }{
		{"a gRPC stream", "grpc", `"direction":"both"`},
		{"a WebSocket session", "websocket", `"direction":"both"`},
		{"a gRPC stream with its own per_stream bucket", "grpc", `"direction":"both","per_stream":true`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			callCounters.Lock()
			cc := callCounters.m["meshlimit"]
			if cc == nil {
				cc = &callCounter{}
				callCounters.m["meshlimit"] = cc
			}
			callCounters.Unlock()
			ctx := experimental.WithFunctionListenerFactory(context.Background(), cc)
			p, err := envoyhost.NewPlugin(ctx, module(t, "meshlimit"), envoyhost.Config{
				VMID: "meshlimit", RootID: "meshlimit", Workers: 1, Clock: envoyhost.NewClock(epoch),
				PluginConfig: []byte(strings.Replace(messageRuleAt("1000000000/s"), `"direction":"request"`, tc.block, 1)),
			})
			require.NoError(t, err)
			defer p.Close()
			var s *envoyhost.Stream
			var up, down []byte
			if tc.proto == "grpc" {
				s = openGRPC(t, p.VM(0), "ann")
				for range 16 {
					up = append(up, grpcMessage(16)...)
				}
				down = up
			} else {
				s = openWS(t, p.VM(0), "ann")
				for range 16 {
					up = append(up, wsText("hello", true)...)
					down = append(down, wsText("hello", false)...)
				}
			}
			send := func() {
				_, err := s.SendRequestBody(up, false)
				require.NoError(t, err)
				_, err = s.SendResponseBody(down, false)
				require.NoError(t, err)
			}
			for range 100 {
				send()
			}
			before := cc.snapshot()
			const n = 200
			for range n {
				send()
			}
			after := cc.snapshot()
			delta := make([]int64, len(after))
			for i := range after {
				delta[i] = after[i] - before[i]
			}
			r := callsPerRequest{cc, delta, n}
			require.Greater(t, r.guest(), 10.0, "the counter sees the guest's calls")
			assert.Zero(t, r.of("runtime.mallocgc"), "heap allocations per pair of chunks")
			assert.Equal(t, int64(2*(100+n)*16), counter(p, "meshlimit.messages.counted"))
		})
	}
}
