package e2e

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

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
