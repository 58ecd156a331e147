package e2e

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/internal/envoyhost"
)

// Attack 22, broken on 8e1d34f: a request the upstream has already answered (an upstream that
// answers before it reads the body, or streams from the start) is given back when its body is then
// denied by a body-stage rule. The client chooses a body the body-stage rule denies (here a
// max_tokens past the budget), sent after the answer: every global admission of the request is
// undone, so a global rule that reads no body never counts it. 20 of 20 answers reached the client
// through a 1/m per-address global rule (1 of 20 with a body the budget admits).
//
// Run: ATTACK_WASM=/path/to/meshlimit.wasm go test -run TestAServedRequest ./e2e/ (default: build/).

const a22PerIP = `{"name":"per-ip","scope":"global","match":{"path":{"exact":"/login"}},"key":["client_ip"],"limits":[{"rate":"1/m"}]}`

// postLoginHeaders opens a stream from ip on vm, sends POST /login's headers (no end of stream)
// and waits until the filter has decided them. The caller closes the stream; ctx bounds its waits.
func postLoginHeaders(t *testing.T, p *envoyhost.Plugin, vm int, ip string) (*envoyhost.Stream, context.Context) {
	t.Helper()
	s := p.VM(vm).NewStream(envoyhost.StreamInfo{SourceAddress: ip + ":4000"})
	h := envoyhost.Headers{{":method", "POST"}, {":path", "/login"}, {":authority", "app.example"}, {":scheme", "http"}, {"content-type", "application/json"}}
	_, err := s.SendRequestHeaders(h, false)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	t.Cleanup(cancel)
	_, err = s.Wait(ctx)
	require.NoError(t, err)
	return s, ctx
}

// servedBeforeBody sends POST /login headers from ip, lets the upstream answer (headers and a first
// chunk; the whole answer when whole), then sends body. It reports whether the answer's first chunk
// reached the client.
func servedBeforeBody(t *testing.T, p *envoyhost.Plugin, vm int, ip, body string, whole bool) bool {
	t.Helper()
	s, ctx := postLoginHeaders(t, p, vm, ip)
	served := false
	if s.LocalReply() == nil {
		_, err := s.SendResponseHeaders(envoyhost.Headers{{":status", "200"}}, false)
		require.NoError(t, err)
		_, err = s.SendResponseBody([]byte("the-answer"), whole)
		require.NoError(t, err)
		served = strings.Contains(string(s.DownstreamBody()), "the-answer")
		settle(t, p)
		_, _ = s.SendRequestBody([]byte(body), true)
		_, _ = s.Wait(ctx)
		if !whole {
			_, _ = s.SendResponseBody([]byte("-rest"), true)
		}
	}
	_ = s.Close()
	settle(t, p)
	return served
}

func TestAServedRequestIsNotGivenBackWhenABodyStageRuleDeniesItsBodyAfterwards(t *testing.T) {
	cases := []struct {
		name         string
		rules, body  string
		whole        bool
		wantServed   int
		wantGivenBck int64
	}{
		{"a body the budget admits is counted by the global rule (control)", a22PerIP + "," + a22Budget, `{"max_tokens":1}`, true, 1, 0},
		{"the whole answer, then a body the budget denies, is still counted", a22PerIP + "," + a22Budget, `{"max_tokens":1000}`, true, 1, 0},
		{"the answer's first chunk, then a body the budget denies, is still counted", a22PerIP + "," + a22Budget, `{"max_tokens":1000}`, false, 1, 0},
		{"a local per-address rule: the whole answer, then a denied body, is still counted", strings.Replace(a22PerIP, `"scope":"global",`, "", 1) + "," + a22Budget, `{"max_tokens":1000}`, true, 1, 0},
		{"a global budget (the body call denies): the answer's first chunk, then a denied body, is still counted", a22PerIP + "," + strings.Replace(a22Budget, `"name":"budget",`, `"name":"budget","scope":"global",`, 1), `{"max_tokens":1000}`, false, 1, 0},
		{"with a counted login rule too, the whole answer then a denied body is still counted", a22Login + "," + a22PerIP + "," + a22Budget, `{"max_tokens":1000}`, true, 1, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			clock := envoyhost.NewClock(epoch)
			svc := startSpy(t, clock)
			p := load(t, attackModule(t), globalConfig(c.rules), 2, svc.withIt(clock))
			served := 0
			for i := range 20 { // within one minute: the clock does not move
				if servedBeforeBody(t, p, i%2, "198.51.100.7", c.body, c.whole) {
					served++
				}
			}
			t.Logf("answers that reached the client: %d of 20 (per-ip 1/m); per-ip.given_back %d", served, counter(p, "meshlimit.rule.per-ip.given_back"))
			assert.Equal(t, c.wantServed, served, "answers through a 1/m global rule in a minute")
			assert.Equal(t, c.wantGivenBck, counter(p, "meshlimit.rule.per-ip.given_back"), "a served request's admission is kept")
		})
	}
}
