package e2e

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/internal/envoyhost"
	"github.com/meshlimit/meshlimit/internal/redistest"
)

// Task glob22, finding 1: a request denied by one global limit gave back what another admitted
// with an age (the time since its check plus global.timeout) that, within the first timeout of a
// window, named the window before: the service gave nothing back, and the filter counted it given
// back. The undo now names the store's time of the take (the decision's at_us).

// windowStart is 100 ms into a Monday, 00:00 UTC: into a minute, a day and an ISO week, less than
// globalConfig's timeout (200ms) after each began.
var windowStart = time.Date(2026, 11, 30, 0, 0, 0, int(100*time.Millisecond), time.UTC)

// sendTenantUser sends a request of user of tenant through vm and reports whether it was admitted.
func sendTenantUser(t *testing.T, vm *envoyhost.VM, tenant, user string) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	req := get("api.example", "/orders", "192.0.2.1", [2]string{"x-tenant", tenant}, [2]string{"x-user", user})
	res, err := vm.RoundTrip(ctx, req, ok200)
	require.NoError(t, err)
	return res.LocalReply == nil
}

// TestAUserOverItsGlobalLimitSpendsNothingOfItsTenantsGlobalQuota: rules tenant (global, 5 per
// window, listed first) and user (global, 1 per minute, asking the service every time), the service on a real Redis at 100 ms
// into the windows. u1's 30 requests: the first is admitted, each of the 29 others is admitted by
// tenant and denied by user, and tenant's unit is given back into the window that took it. So
// four more users of the tenant are admitted, and a fifth is denied.
func TestAUserOverItsGlobalLimitSpendsNothingOfItsTenantsGlobalQuota(t *testing.T) {
	for _, tenant := range []string{
		`"rate": "5/m", "algorithm": "fixed_window"`,
		`"rate": "5/day", "algorithm": "fixed_window"`,
		`"rate": "5/week", "algorithm": "fixed_window", "calendar_offset": "Z"`,
		`"rate": "5/m", "algorithm": "sliding_window"`,
		`"rate": "5/m", "algorithm": "sliding_log"`,
		`"rate": "5/m", "algorithm": "token_bucket"`,
	} {
		t.Run(tenant, func(t *testing.T) {
			redis := redistest.Start(t)
			svc := startSettleServiceAt(t, redis.Addr(), windowStart)
			cfg := globalConfig(`{"name": "tenant", "scope": "global", "key": [{"header": "x-tenant"}], "limits": [{` + tenant + `}]},
				{"name": "user", "scope": "global", "key": [{"header": "x-user"}], "cache_denials": false, "limits": [{"rate": "1/m"}]}`)
			p := load(t, module(t, "meshlimit"), cfg, 2, toReplica(svc.addr))
			admitted := 0
			for i := range 30 {
				if sendTenantUser(t, p.VM(i%2), "t1", "u1") {
					admitted++
				}
			}
			require.Equal(t, 1, admitted, "user admits u1 once a minute")
			calls := counter(p, "meshlimit.global.give_back_calls")
			svc.waitSettles(t, calls)
			assert.Equal(t, int64(29), calls, "tenant admitted each of u1's 29 denied requests, and each was given back")
			for i := 2; i <= 5; i++ {
				assert.True(t, sendTenantUser(t, p.VM(i%2), "t1", "u"+strconv.Itoa(i)), "u1's 29 denied requests spent nothing of tenant")
			}
			assert.False(t, sendTenantUser(t, p.VM(0), "t1", "u6"), "tenant is spent by its five admitted requests")
			assert.Equal(t, int64(29), counter(p, "meshlimit.rule.tenant.given_back"))
			assert.Zero(t, counter(p, "meshlimit.global.give_back_failed"))
		})
	}
}
