package e2e

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/meshlimit/meshlimit/internal/envoyhost"
)

// TestAttackFailedCheckProbe: the login rule's check fails (a 503 from the service) for some
// requests, which failure_mode allows; their answer is a 200 (uncounted) or a 401.
func TestAFailedCheckNeverGivesBackAChargeItDidNotSee(t *testing.T) {
	for _, status := range []string{"200", "401"} {
		t.Run("answer="+status, func(t *testing.T) {
			clock := envoyhost.NewClock(epoch)
			svc := startSpy(t, clock)
			var failing atomic.Bool
			svc.fail = func(b string) bool { return failing.Load() && strings.HasPrefix(b, `{"descriptors"`) }
			cfg := `{"global":{"cluster":"outbound|8081||meshlimit.meshlimit.svc.cluster.local","timeout":"200ms",
				"breaker":{"failures":1000,"cooldown":"10s"}},"rules":[` + a22Login + `]}`
			p := load(t, attackModule(t), cfg, 2, svc.withIt(clock))
			const ip = "198.51.100.7"
			reached := 0
			for i := range 30 {
				failing.Store(i%2 == 1) // every other check fails
				st := "401"
				if i%2 == 1 {
					st = status
				}
				if attempt(t, p, i%2, "/login", ip, st) && st == "401" {
					reached++
				}
			}
			n, bodies := svc.undos()
			t.Logf("401 guesses that reached: %d (limit 5); undo calls %d; failures %d; counted %d given_back %d",
				reached, n, counter(p, "meshlimit.global.failures"), counter(p, "meshlimit.rule.login.counted"), counter(p, "meshlimit.rule.login.given_back"))
			for i, b := range svc.calls() {
				if i < 6 {
					t.Logf("call %d: %s", i, b)
				}
			}
			_ = bodies
			assert.Zero(t, n, "no undo for a check the filter never saw answered")
			if status == "200" {
				assert.Equal(t, 5, reached)
			} else {
				assert.Equal(t, 10, reached, "fail open (failure_mode allow) for the 5 failed checks before the key is cached as denied")
			}
			_ = fmt.Sprint
		})
	}
}
