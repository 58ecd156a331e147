package e2e

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/internal/envoyhost"
)

// TestAnAttemptTheFallbackDecidedGivesNothingBackToTheServiceAfterTheBreakerCloses: a guess R
// admitted while the breaker is open (decided by failure_mode, no service charge) is answered with
// an uncounted 200 after the breaker closed: an undo to the service would give back another guess.
func TestAnAttemptTheFallbackDecidedGivesNothingBackToTheServiceAfterTheBreakerCloses(t *testing.T) {
	clock := envoyhost.NewClock(epoch)
	svc := startSpy(t, clock)
	var failing atomic.Bool
	svc.fail = func(b string) bool { return failing.Load() && strings.HasPrefix(b, `{"descriptors"`) }
	cfg := `{"global":{"cluster":"outbound|8081||meshlimit.meshlimit.svc.cluster.local","timeout":"200ms",
		"breaker":{"failures":1,"cooldown":"1s"}},"rules":[` + a22Login + `]}`
	p := load(t, attackModule(t), cfg, 1, svc.withIt(clock))
	const ip = "198.51.100.7"
	for range 4 {
		require.True(t, attempt(t, p, 0, "/login", ip, "401"))
	}
	failing.Store(true)
	require.True(t, attempt(t, p, 0, "/login", ip, "200"), "the failed check: failure_mode allow") // opens the breaker
	r := p.VM(0).NewStream(envoyhost.StreamInfo{SourceAddress: ip + ":4000"})
	_, err := r.SendRequestHeaders(get("app.example", "/login", ip).Headers, true)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	_, err = r.Wait(ctx)
	require.NoError(t, err)
	require.Nil(t, r.LocalReply(), "R is admitted while the breaker is open")
	failing.Store(false)
	advanceSettled(t, clock, 2*time.Second, p)
	require.True(t, attempt(t, p, 0, "/login", ip, "401"), "the probe closes the breaker: the fifth guess")
	before, _ := svc.undos()
	_, err = r.SendResponseHeaders(envoyhost.Headers{{":status", "200"}}, true)
	require.NoError(t, err)
	require.NoError(t, r.Close())
	settle(t, p)
	after, bodies := svc.undos()
	more := 0
	for range 10 {
		if attempt(t, p, 0, "/login", ip, "401") {
			more++
		}
	}
	t.Logf("undo calls for R: %d %v; guesses admitted after the fifth: %d (want 0)", after-before, bodies, more)
	assert.Equal(t, before, after, "R's admission was not the service's")
	assert.Zero(t, more)
}
