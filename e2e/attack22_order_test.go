package e2e

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/meshlimit/meshlimit/internal/envoyhost"
)

// guessesWithDeniedInterleaved: rules in the given order, the login rule global count_on 401 5/m per
// IP, per-user global 1/m per x-user. One address; alice spends her per-user unit first; then each
// round sends a guess as a fresh user (401) and `denied` requests as alice, which per-user denies.
// Returns how many guesses reached the upstream within one minute (frozen clock).
func guessesWithDeniedInterleaved(t *testing.T, loginFirst bool, denied, rounds int) (int, *spyService, *envoyhost.Plugin) {
	clock := envoyhost.NewClock(epoch)
	svc := startSpy(t, clock)
	login := `{"name":"login","scope":"global","match":{"path":{"exact":"/login"}},"key":["client_ip"],
		"limits":[{"rate":"5/m"}],"count_on":{"status":["401"]}}`
	user := `{"name":"per-user","scope":"global","key":[{"header":"x-user"}],"limits":[{"rate":"1/m"}]}`
	rules := login + "," + user
	if !loginFirst {
		rules = user + "," + login
	}
	p := load(t, attackModule(t), globalConfig(rules), 2, svc.withIt(clock))
	const ip = "198.51.100.7"
	attempt(t, p, 0, "/login", ip, "200", [2]string{"x-user", "alice"}) // alice's unit, a success
	reached := 0
	for i := range rounds {
		if attempt(t, p, i%2, "/login", ip, "401", [2]string{"x-user", fmt.Sprintf("u%d", i)}) {
			reached++
		}
		for j := range denied {
			attempt(t, p, (i+j)%2, "/login", ip, "401", [2]string{"x-user", "alice"})
		}
	}
	return reached, svc, p
}

func TestDeniedRequestsInterleavedWithGuessesGiveTheCountedRuleNoFreeGuesses(t *testing.T) {
	for _, loginFirst := range []bool{true, false} {
		for _, denied := range []int{0, 1, 2} {
			t.Run(fmt.Sprintf("loginFirst=%v/denied=%d", loginFirst, denied), func(t *testing.T) {
				reached, svc, p := guessesWithDeniedInterleaved(t, loginFirst, denied, 20)
				n, bodies := svc.undos()
				t.Logf("reached %d of 20 guesses; undo calls %d; login.given_back %d per-user.given_back %d",
					reached, n, counter(p, "meshlimit.rule.login.given_back"), counter(p, "meshlimit.rule.per-user.given_back"))
				for i, b := range svc.calls() {
					if i < 8 {
						t.Logf("call %d: %s", i, b)
					}
				}
				_ = bodies
				assert.Equal(t, 5, reached, "at most the login limit of 401 guesses a minute")
			})
		}
	}
}
