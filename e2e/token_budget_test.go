package e2e

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/internal/envoyhost"
)

// Issue 20, finding 3: a token budget charges what the answer says, and an answer that says nothing
// is charged the rule's max (on_missing), never the reservation the client chose.

// documentedBudget is the example of docs/configuration.md: 100,000 tokens per user per day,
// reserved from max_tokens (default 1000, at most 8000), settled from usage.total_tokens.
const documentedBudget = `{"rules": [{"name": "tokens", "key": [{"header": "x-user"}], "limits": [{"rate": "100000/d"}],
	"cost": {"request_json": "max_tokens", "default": 1000, "max": 8000, "settle": {"response_json": "usage.total_tokens"}}}]}`

func TestAClientWhoseAnswerCarriesNoUsageIsChargedMaxNotItsReservation(t *testing.T) {
	const workers, attempts = 4, 200
	prompt := `{"model": "m", "max_tokens": 1, "stream": true, "messages": [{"role": "user", "content": "` +
		strings.Repeat("word ", 7999) + `"}]}` // about 8,000 tokens of prompt, 1 of completion
	for _, tc := range []struct {
		name   string
		answer func(t *testing.T, s *envoyhost.Stream)
	}{
		{"an event stream without a usage event", func(t *testing.T, s *envoyhost.Stream) {
			settleAnswer(t, s, 200, "text/event-stream", "data: {\"choices\": [{\"delta\": {\"content\": \"ok\"}}]}\n\n", "data: [DONE]\n\n")
		}},
		{"a client that leaves before the usage event", func(t *testing.T, s *envoyhost.Stream) {
			cutAnswer(t, s, "text/event-stream", "data: {\"choices\": [{\"delta\": {\"content\": \"ok\"}}]}\n\n")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := load(t, module(t, "meshlimit"), documentedBudget, workers)
			admitted := 0
			for i := range attempts { // the clock is frozen: one day's budget
				s, ok := postJSON(t, p.VM(i%workers), "mallory", prompt)
				if !ok {
					continue
				}
				admitted++
				tc.answer(t, s)
			}
			// Each is charged max (8000): 100,000 admits 13 (the 13th leaves a debt of 4,000).
			assert.Equal(t, 13, admitted, "requests of max_tokens 1 admitted in a day of 100,000 tokens")
			assert.Equal(t, int64(13), counter(p, "meshlimit.rule.tokens.settle_kept"))
			t.Logf("%s: %d of %d requests admitted in a day of 100,000 tokens", tc.name, admitted, attempts)
		})
	}
}

// TestAnUpstreamTimeoutKeepsTheReservationWhileTheUpstreamsOwn5xxRefundsIt: Envoy's 504 after the
// route's timeout comes after the model worked on the request: the reservation stays charged,
// whatever on_error says; the upstream's own 503 is refunded (on_error "refund", the default).
func TestAnUpstreamTimeoutKeepsTheReservationWhileTheUpstreamsOwn5xxRefundsIt(t *testing.T) {
	for _, tc := range []struct {
		details  string
		status   int
		nextFits bool
	}{
		{"upstream_response_timeout", 504, false},
		{"upstream_per_try_timeout", 504, false},
		{"via_upstream", 503, true},
	} {
		t.Run(tc.details, func(t *testing.T) {
			p := load(t, module(t, "meshlimit"), budgetConfig("", ""), 2, func(c *envoyhost.Config) {
				c.Properties = map[string][]byte{"response\x00code_details": []byte(tc.details)}
			})
			s, ok := postJSON(t, p.VM(0), "alice", maxTokens(600))
			require.True(t, ok)
			settleAnswer(t, s, tc.status, "text/plain", "upstream request timeout")
			s, ok = postJSON(t, p.VM(1), "alice", maxTokens(600))
			assert.Equal(t, tc.nextFits, ok, "600 of 1000 were refunded: %t", tc.nextFits)
			if ok {
				settleAnswer(t, s, 200, "application/json", usageOf(1))
			}
		})
	}
}
