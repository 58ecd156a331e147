package e2e

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/internal/envoyhost"
)

// Review 20b, finding 3: one client's slow readers take at most their keys' shares of a worker's
// settle_memory (1/16 each), and when many keys fill it a newcomer's copy evicts one of the key
// holding the most, so another client's settlement stays exact.

func TestAnHonestClientSettlesExactlyWhileAnotherHolds520SlowStreams(t *testing.T) {
	for _, tc := range []struct{ keys, refused int }{
		{1, 520 - 32},   // one key holds its share: 32 copies of 64 KiB (1/16 of 32 MiB)
		{15, 520 - 480}, // 15 shares: 480 copies, 30 MiB
		{50, 520 - 512}, // 50 keys of 10 or 11 fill the 32 MiB: alice's copies evict those of a key holding 11
	} {
		keys := tc.keys
		t.Run(strconv.Itoa(keys)+" keys", func(t *testing.T) {
			p := load(t, module(t, "meshlimit"), `{"rules": [{"name": "tokens", "key": [{"header": "x-user"}], "limits": [{"rate": "1000000/d"}],
				"cost": {"request_json": "max_tokens", "default": 500, "max": 16000, "settle": {"response_json": "usage.total_tokens"}}}]}`, 2)
			var held []*envoyhost.Stream
			for i := range 520 { // each has had one chunk: its event stream holds a max_body copy
				s, ok := postJSON(t, p.VM(0), "mallory"+strconv.Itoa(i%keys), maxTokens(1))
				require.True(t, ok)
				_, err := s.SendResponseHeaders(envoyhost.Headers{{":status", "200"}, {"content-type", "text/event-stream"}}, false)
				require.NoError(t, err)
				_, err = s.SendResponseBody([]byte(`data: {"choices": [`), false)
				require.NoError(t, err)
				held = append(held, s)
			}
			refused := counter(p, "meshlimit.settle_copy_refused")
			assert.Equal(t, int64(tc.refused), refused, "the attacker's copies refused")
			for _, ct := range []string{"application/json", "text/event-stream"} {
				before := counter(p, "meshlimit.rule.tokens.settle_overrun")
				s, ok := postJSON(t, p.VM(0), "alice", maxTokens(100))
				require.True(t, ok)
				usage := `{"usage": {"total_tokens": 700}}`
				if ct == "text/event-stream" {
					usage = "data: " + usage + "\n\n"
				}
				settleAnswer(t, s, 200, ct, usage)
				assert.Equal(t, int64(600), counter(p, "meshlimit.rule.tokens.settle_overrun")-before, "alice (%s) reserved 100, used 700: charged 700", ct)
			}
			if keys < 16 {
				assert.Equal(t, refused, counter(p, "meshlimit.settle_copy_refused"), "alice's streams got their copies without evicting")
			}
			for _, s := range held {
				require.NoError(t, s.Close())
			}
		})
	}
}
