package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/internal/envoyhost"
)

// Issue 22: a configuration of local rate rules only is decided by the filter's local plan (one
// straight line chosen at configure time); the same rules beside a counted rule that never
// matches go the general path. Both answer every request alike on the module.

func TestTheModulesLocalPlanAnswersEveryRequestAsItsGeneralPath(t *testing.T) {
	never := `{"name": "never", "key": ["client_ip"], "match": {"path": {"exact": "/never"}}, "limits": [{"rate": "1/h"}], "count_on": {"status": ["401"]}}`
	for _, tc := range []struct{ name, rules, response string }{
		{"one per-IP rule", `{"name": "ip", "key": ["client_ip"], "limits": [{"rate": "3/m"}]}`, `{}`},
		{"two rules, a shadow one, partition keys, both header sets",
			`{"name": "user", "key": [{"header": "x-user"}], "shadow": true, "shadow_header": "x-shadow", "limits": [{"rate": "2/m", "algorithm": "fixed_window"}]},
			 {"name": "ip24", "key": [{"client_ip": {"ipv4_mask": 24}}], "limits": [{"rate": "4/m", "algorithm": "sliding_window"}, {"rate": "6/h"}]}`,
			`{"rate_limit_headers": ["ietf", "draft03"], "partition_key": true, "partition_key_secret": "0123456789abcdef"}`},
		{"an override and a cost header", `{"name": "user", "key": [{"header": "x-user"}], "cost": {"header": "x-cost", "max": 3},
			"overrides": [{"value": "vip", "limits": [{"rate": "9/m"}]}], "limits": [{"rate": "3/m", "algorithm": "sliding_log"}]}`, `{"quota_headers_on_allowed": false}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := envoyhost.NewClock(epoch)
			onClock := func(c *envoyhost.Config) { c.Clock = clock }
			planned := load(t, module(t, "meshlimit"), fmt.Sprintf(`{"response": %s, "rules": [%s]}`, tc.response, tc.rules), 2, onClock)
			general := load(t, module(t, "meshlimit"), fmt.Sprintf(`{"response": %s, "rules": [%s, %s]}`, tc.response, tc.rules, never), 2, onClock)
			denied := 0
			for i := range 90 {
				ip := []string{"192.0.2.1", "192.0.2.2", "198.51.100.3"}[i%3]
				req := func() *envoyhost.Request {
					r := withKey(get("api.example", "/items", ip), "x-user", []string{"ann", "bob", "vip"}[i/3%3])
					if i%4 == 0 {
						r = withKey(r, "x-cost", "2")
					}
					return r
				}
				want, got := roundTrip(t, general.VM(i%2), req()), roundTrip(t, planned.VM(i%2), req())
				require.Equal(t, want, got, "request %d", i)
				if got.LocalReply != nil {
					denied++
				}
				if i%10 == 9 {
					clock.Advance(7 * time.Second)
				}
			}
			require.Positive(t, denied, "the limits deny some requests")
		})
	}
}
