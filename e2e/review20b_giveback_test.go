package e2e

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Review 20b, findings 1 and 2: a request the shedder denies, or a local budget denies at the body
// stage, spends nothing of the local rules before it.

func TestAClientShedOverItsKeyShareDrainsNoneOfASharedRule(t *testing.T) {
	p := load(t, module(t, "meshlimit"), `{"rules":[{"name":"path","match":{"path":{"prefix":"/v1/"}},"limits":[{"rate":"100/h"}]}],
		"shed":{"capacity":10,"key_share":100}}`, 2)
	hold, ok := openStream(t, p.VM(0), get("a.test", "/v1/x", "10.6.6.6")) // its one-slot share, held
	require.True(t, ok)
	shed := 0
	for i := range 150 {
		if status(roundTrip(t, p.VM(i%2), get("a.test", "/v1/x", "10.6.6.6"))) == 503 {
			shed++
		}
	}
	others := 0
	for i := range 20 {
		if status(roundTrip(t, p.VM(i%2), get("a.test", "/v1/x", "10.7.7."+strconv.Itoa(i)))) == 200 {
			others++
		}
	}
	require.NoError(t, hold.Close())
	assert.Equal(t, 150, shed, "the attacker is shed over its key share")
	assert.Equal(t, 20, others, "its 150 shed requests spent none of the shared 100/h")
	assert.Equal(t, int64(150), counter(p, "meshlimit.rule.path.given_back"))
}

func TestAClientWhoseBudgetDeniesAtTheBodyStageDrainsNoneOfASharedRule(t *testing.T) {
	ra := `{"name":"ra","match":{"path":{"prefix":"/v1/"}},"limits":[{"rate":"5/h"}]}`
	rb := `{"name":"rb","key":[{"header":"x-user"}],"limits":[{"rate":"1000/d"}],
		"cost":{"request_json":"max_tokens","default":500,"max":4000,"settle":{"response_json":"usage.total_tokens"}}}`
	for _, tc := range []struct{ name, rules string }{
		{"the shared rule first", ra + "," + rb},
		{"the budget first", rb + "," + ra},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := load(t, module(t, "meshlimit"), `{"rules":[`+tc.rules+`]}`, 2)
			chat := func(vm int, user, body string) int {
				req := get("llm.test", "/v1/chat", "10.0.0.1", [2]string{"x-user", user}, [2]string{"content-type", "application/json"})
				req.Headers[0][1] = "POST"
				req.Body = []byte(body)
				return status(roundTrip(t, p.VM(vm), req))
			}
			denied := 0
			for i := range 10 { // each asks for more than its whole budget: rb denies at the body stage
				if chat(i%2, "mallory", `{"max_tokens":2000}`) == 429 {
					denied++
				}
			}
			admitted := 0
			for i := range 5 {
				if chat(i%2, "alice"+strconv.Itoa(i), `{"max_tokens":1}`) == 200 { // each its own budget: ok200 carries no usage
					admitted++
				}
			}
			assert.Equal(t, 10, denied)
			assert.Equal(t, 5, admitted, "mallory's 10 body-stage denials spent none of the shared 5/h")
			assert.Equal(t, int64(10), counter(p, "meshlimit.rule.ra.given_back"))
		})
	}
}
