package e2e

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/internal/envoyhost"
)

// Issue 20, finding 5: a request denied by a later rule spends nothing of an earlier one.

func TestAClientOverItsOwnLimitDrainsNoneOfTheQuotaItSharesWithOthers(t *testing.T) {
	const workers, flood, quota = 8, 400, 100
	for _, alg := range []string{"token_bucket", "fixed_window", "sliding_log", "sliding_window"} {
		t.Run(alg, func(t *testing.T) {
			proc := envoyhost.NewProcess()
			proc.YieldOnSharedData() // lost CAS races are common, as between Envoy's worker threads
			p := load(t, module(t, "meshlimit"), `{"rules":[
				{"name":"ra","key":["path"],"limits":[{"rate":"`+strconv.Itoa(quota)+`/h","algorithm":"`+alg+`"}]},
				{"name":"rb","key":[{"header":"x-user"}],"limits":[{"rate":"1/h"}]}]}`, workers,
				func(c *envoyhost.Config) { c.Process = proc })
			as := func(user string) *envoyhost.Request {
				return withKey(get("api.example", "/shared", "192.0.2.1"), "x-user", user)
			}
			var floodAdmitted atomic.Int64
			var wg sync.WaitGroup
			for w := range workers { // u1 on every VM at once; the clock stays frozen
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range flood / workers {
						if roundTrip(t, p.VM(w), as("u1")).LocalReply == nil {
							floodAdmitted.Add(1)
						}
					}
				}()
			}
			wg.Wait()
			others := 0
			for i := range quota {
				if roundTrip(t, p.VM(i%workers), as("u"+strconv.Itoa(i+2))).LocalReply == nil {
					others++
				}
			}
			assert.Equal(t, int64(1), floodAdmitted.Load(), "u1 has 1/h of its own")
			assert.Equal(t, quota-1, others, "u1's %d denied requests spent none of the shared %d/h", flood-1, quota)
			assert.Equal(t, int64(flood-1), counter(p, "meshlimit.rule.ra.given_back"))
			assert.Zero(t, counter(p, "meshlimit.rule.ra.cas_exhausted"))
		})
	}
}

func TestARequestTheServiceDeniesSpendsNothingOfTheLocalRulesBeforeIt(t *testing.T) {
	clock := envoyhost.NewClock(epoch)
	svc := startService(t, clock)
	cfg := globalConfig(`{"name": "ra", "key": ["path"], "limits": [{"rate": "2/h"}]},
		{"name": "rb", "scope": "global", "key": [{"header": "x-user"}], "limits": [{"rate": "1/h"}]}`)
	p := load(t, module(t, "meshlimit"), cfg, 2, withService(svc, nil), func(c *envoyhost.Config) { c.Clock = clock })
	send := func(vm int, user string) bool {
		ctx, cancel := context.WithTimeout(context.Background(), patience)
		defer cancel()
		res, err := p.VM(vm).RoundTrip(ctx, withKey(get("api.example", "/shared", "192.0.2.1"), "x-user", user), ok200)
		require.NoError(t, err)
		return res.LocalReply == nil
	}
	require.True(t, send(0, "u1"))
	for i := range 6 { // the service denies u1, then each VM's over-limit cache does
		assert.False(t, send(i%2, "u1"), "u1's request %d", i+2)
	}
	assert.True(t, send(1, "u2"), "u1's denials spent none of ra's 2/h")
	assert.False(t, send(0, "u3"), "ra is spent by u1's and u2's admitted requests")
	assert.Equal(t, int64(6), counter(p, "meshlimit.rule.ra.given_back"))
}
