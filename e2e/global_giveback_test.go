package e2e

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/internal/envoyhost"
	"github.com/meshlimit/meshlimit/internal/redistest"
)

// Issue 20, finding 5, for global rules: what a global rule admitted is given back, through the
// decision service, when a later decision denies the request.

// sendAs sends a request of user to /shared through vm and reports whether it was admitted.
func sendAs(t *testing.T, vm *envoyhost.VM, user string) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	res, err := vm.RoundTrip(ctx, withKey(get("api.example", "/shared", "192.0.2.1"), "x-user", user), ok200)
	require.NoError(t, err)
	return res.LocalReply == nil
}

// TestARequestDeniedAfterAGlobalRuleAdmittedItSpendsNothingOfTheGlobalQuota: rules ra (global, per
// path, 2/m) then rb (per user, 1/m), the service on a real Redis. u1's second request is denied by
// rb: when rb is local, before the call (nothing of ra is charged); when rb is global, in the same
// answer that admitted ra, whose unit the filter then gives back. u2 is still admitted by ra. (The
// leaky bucket, which would delay u2 rather than deny u3, is given back by the same call: the
// store's contract and TestLuaUndoMatchesAlgorithmsForEveryKind cover it.)
func TestARequestDeniedAfterAGlobalRuleAdmittedItSpendsNothingOfTheGlobalQuota(t *testing.T) {
	for _, alg := range []string{"token_bucket", "fixed_window", "sliding_log", "sliding_window"} {
		for _, rb := range []string{`"scope": "local"`, `"scope": "global"`} {
			t.Run(alg+"/rb "+rb, func(t *testing.T) {
				redis := redistest.Start(t)
				svc := startSettleService(t, redis.Addr())
				cfg := globalConfig(`{"name": "ra", "scope": "global", "key": ["path"], "limits": [{"rate": "2/m", "algorithm": "` + alg + `"}]},
					{"name": "rb", ` + rb + `, "key": [{"header": "x-user"}], "limits": [{"rate": "1/m"}]}`)
				p := load(t, module(t, "meshlimit"), cfg, 2, toReplica(svc.addr))
				require.True(t, sendAs(t, p.VM(0), "u1"))
				require.False(t, sendAs(t, p.VM(1), "u1"), "rb denies u1's second request")
				svc.waitSettles(t, counter(p, "meshlimit.global.give_back_calls"))
				assert.True(t, sendAs(t, p.VM(0), "u2"), "u1's denied request spent nothing of ra's 2/m")
				assert.False(t, sendAs(t, p.VM(1), "u3"), "ra is spent by u1's and u2's admitted requests")
				if rb == `"scope": "global"` {
					assert.Equal(t, int64(1), counter(p, "meshlimit.rule.ra.given_back"))
					assert.Equal(t, int64(1), counter(p, "meshlimit.global.give_back_calls"))
				}
				assert.Zero(t, counter(p, "meshlimit.global.give_back_failed"))
			})
		}
	}
}
