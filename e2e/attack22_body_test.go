package e2e

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/internal/envoyhost"
)

const a22Login = `{"name":"login","scope":"global","match":{"path":{"exact":"/login"}},"key":["client_ip"],
	"limits":[{"rate":"5/m"}],"count_on":{"status":["401"]}}`

const a22Budget = `{"name":"budget","match":{"path":{"exact":"/login"}},"key":["client_ip"],"limits":[{"rate":"10/m"}],
	"cost":{"request_json":"max_tokens","default":1,"max":1000,"max_body":256}}`

// bodyGuess sends a POST /login from ip: headers, then (early) the upstream's answer, then the
// body. It reports whether the answer reached the client (the guess was answered by the upstream).
func bodyGuess(t *testing.T, p *envoyhost.Plugin, vm int, ip, body, respStatus string, early bool) (answered bool, s *envoyhost.Stream) {
	t.Helper()
	s = p.VM(vm).NewStream(envoyhost.StreamInfo{SourceAddress: ip + ":4000"})
	h := envoyhost.Headers{{":method", "POST"}, {":path", "/login"}, {":authority", "app.example"}, {":scheme", "http"}, {"content-type", "application/json"}}
	_, err := s.SendRequestHeaders(h, false)
	require.NoError(t, err)
	wait := func() envoyhost.Action {
		ctx, cancel := context.WithTimeout(context.Background(), patience)
		defer cancel()
		act, err := s.Wait(ctx)
		require.NoError(t, err)
		return act
	}
	wait()
	if s.LocalReply() != nil {
		_ = s.Close()
		settle(t, p)
		return false, s
	}
	if early {
		_, err = s.SendResponseHeaders(envoyhost.Headers{{":status", respStatus}}, true)
		require.NoError(t, err)
		answered = s.LocalReply() == nil && !s.Reset()
		settle(t, p)
		_, _ = s.SendRequestBody([]byte(body), true)
		wait()
	} else {
		_, err = s.SendRequestBody([]byte(body), true)
		require.NoError(t, err)
		wait()
		if s.LocalReply() == nil {
			_, err = s.SendResponseHeaders(envoyhost.Headers{{":status", respStatus}}, true)
			require.NoError(t, err)
			answered = s.LocalReply() == nil && !s.Reset()
		}
	}
	_ = s.Close()
	settle(t, p)
	return answered, s
}

func TestAnEarlyCountedAnswerFollowedByABodyDenialIsStillCounted(t *testing.T) {
	for _, order := range []string{"login,budget", "budget,login"} {
		for _, early := range []bool{true, false} {
			for _, big := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/early=%v/bigbody=%v", order, early, big), func(t *testing.T) {
					clock := envoyhost.NewClock(epoch)
					svc := startSpy(t, clock)
					rules := a22Login + "," + a22Budget
					if order == "budget,login" {
						rules = a22Budget + "," + a22Login
					}
					p := load(t, attackModule(t), globalConfig(rules), 2, svc.withIt(clock))
					body := `{"max_tokens":1}`
					if big {
						body = `{"max_tokens":1000}`
					}
					answered := 0
					for i := range 20 {
						if a, _ := bodyGuess(t, p, i%2, "198.51.100.7", body, "401", early); a {
							answered++
						}
					}
					n, _ := svc.undos()
					t.Logf("401s answered to the client: %d of 20 (limit 5); undo calls %d; login.given_back %d counted %d budget.given_back %d",
						answered, n, counter(p, "meshlimit.rule.login.given_back"), counter(p, "meshlimit.rule.login.counted"), counter(p, "meshlimit.rule.budget.given_back"))
					want := 5
					if big && !early {
						want = 0 // the body is denied before any answer
					}
					assert.Equal(t, want, answered, "401s the client saw")
				})
			}
		}
	}
}
