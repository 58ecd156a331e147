package e2e

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/meshlimit/meshlimit/internal/envoyhost"
)

// Issue 20, finding 4, for a global counted rule: each attempt is charged in the service when it
// arrives (in its check), tentatively, so guesses sent together reach the upstream no more often
// than guesses sent one after the other.

const globalLoginGuard = `{"name":"login","scope":"global","match":{"path":{"exact":"/login"}},"key":["client_ip"],
	"limits":[{"rate":"5/m"}],"count_on":{"status":["401"],"penalty":"15m"}}`

// globalGuessesReaching sends burst guesses from one address every interval for an hour through a
// proxy of 8 workers and the decision service, together (every check answered before any response);
// the upstream answers 401. It returns how many reached the upstream.
func globalGuessesReaching(t *testing.T, every time.Duration, burst int) int {
	const workers = 8
	clock := envoyhost.NewClock(epoch)
	svc := startService(t, clock)
	p := load(t, module(t, "meshlimit"), globalConfig(globalLoginGuard), workers, withService(svc, nil), func(c *envoyhost.Config) { c.Clock = clock })
	reached := guessesThrough(t, p, every, burst)
	assert.Zero(t, counter(p, "meshlimit.global.failures"))
	return reached
}

func TestParallelGuessesOnAGlobalCountedRuleReachTheUpstreamNoMoreThanSequentialOnes(t *testing.T) {
	oneByOne := globalGuessesReaching(t, time.Second, 1)
	together := globalGuessesReaching(t, time.Minute, 1000)
	// 5 guesses, then 15 minutes in the penalty box: 4 rounds of 5 fit in an hour.
	assert.Equal(t, 20, oneByOne, "a guess a second for an hour")
	assert.Equal(t, 20, together, "1,000 guesses a minute, sent together, for an hour")
	t.Logf("guesses that reached the upstream in an hour: %d of one a second, %d of 1,000 a minute sent together", oneByOne, together)
}
