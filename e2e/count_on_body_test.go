package e2e

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/internal/envoyhost"
)

// Review 22: a request whose rules are a global count_on rule, a global rule that reads no body
// and one that reads its cost from the body is admitted with its headers, which go on to the
// upstream, while its body is awaited. A stream that ended then gave back, with the counted charge's
// give-back, the admission of the rule that reads no body: a client that sent its headers and left
// was never counted by it.

const countedBodyRules = `{"name":"per-user","scope":"global","key":[{"header":"x-user"}],"limits":[{"rate":"1/m"}]},
	{"name":"login","scope":"global","key":[{"header":"x-user"}],"limits":[{"rate":"5/m"}],"count_on":{"status":["401"],"count_unanswered":false}},
	{"name":"tokens","scope":"global","key":[{"header":"x-user"}],"limits":[{"rate":"1000/d"}],
	 "cost":{"request_json":"max_tokens","default":500,"max":4000,"max_body":256,"settle":{"response_json":"usage.total_tokens"}}}`

// headersOnly sends alice's request headers without a body and returns the stream once its
// headers' check is answered.
func headersOnly(t *testing.T, vm *envoyhost.VM) *envoyhost.Stream {
	s := vm.NewStream(envoyhost.StreamInfo{})
	_, err := s.SendRequestHeaders(envoyhost.Headers{{":method", "POST"}, {":path", "/v1/x"}, {":authority", "llm.test"}, {"x-user", "alice"}}, false)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	_, err = s.Wait(ctx)
	require.NoError(t, err)
	return s
}

func TestAClientThatLeavesBeforeItsBodyIsStillCountedByTheGlobalRulesItsHeadersPassed(t *testing.T) {
	clock := envoyhost.NewClock(epoch)
	svc := startService(t, clock)
	p := load(t, module(t, "meshlimit"), globalConfig(countedBodyRules), 1, withService(svc, nil), func(c *envoyhost.Config) { c.Clock = clock })
	left := headersOnly(t, p.VM(0))
	require.Nil(t, left.LocalReply(), "admitted with its headers; the body is awaited")
	require.NoError(t, left.Close()) // leaves: the counted charge is given back (count_unanswered false)
	assert.Equal(t, int64(1), counter(p, "meshlimit.rule.login.given_back"))
	assert.Zero(t, counter(p, "meshlimit.rule.per-user.given_back"), "per-user's admission was the request's")
	next := headersOnly(t, p.VM(0))
	assert.NotNil(t, next.LocalReply(), "per-user's 1/m is spent by the request that left")
	require.NoError(t, next.Close())
}
