package e2e

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/meshlimit/meshlimit/internal/envoyhost"
)

// TestAttackEarly200ThenBodyDenialProbe: the upstream answers 200 (uncounted) before the body, then
// the body is denied by the body-stage rule: is the counted charge given back once or twice? Five
// 401 guesses first (counted), then 20 such requests, then guesses again.
func TestAnEarlyUncountedAnswerThenABodyDenialGivesTheChargeBackOnce(t *testing.T) {
	clock := envoyhost.NewClock(epoch)
	svc := startSpy(t, clock)
	p := load(t, attackModule(t), globalConfig(a22Login+","+a22Budget), 2, svc.withIt(clock))
	first := 0
	for i := range 4 {
		if a, _ := bodyGuess(t, p, i%2, "198.51.100.7", `{"max_tokens":1}`, "401", false); a {
			first++
		}
	}
	for i := range 20 {
		bodyGuess(t, p, i%2, "198.51.100.7", `{"max_tokens":1000}`, "200", true)
	}
	after := 0
	for i := range 20 {
		if a, _ := bodyGuess(t, p, i%2, "198.51.100.7", `{"max_tokens":1}`, "401", false); a {
			after++
		}
	}
	n, _ := svc.undos()
	t.Logf("401s: %d before, %d after (limit 5 in all); undo calls %d; given_back %d counted %d",
		first, after, n, counter(p, "meshlimit.rule.login.given_back"), counter(p, "meshlimit.rule.login.counted"))
	assert.Equal(t, 5, first+after)
	assert.Equal(t, 20, n)
}
