package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/internal/envoyhost"
)

// TestAttackDebtProbe: a global fixed-window budget (100/m, reserve x-max-tokens, settle from
// usage.total_tokens). A client with an odd key value (long, C1 control) over-runs: is the debt
// carried on the key its checks use, and is it denied afterwards?
func TestAFixedWindowDebtIsCarriedOnTheKeyTheChecksUseWhateverItsSpelling(t *testing.T) {
	for name, user := range map[string]string{
		"plain":   "mallory",
		"long":    strings.Repeat("m", 700),
		"c1":      "mal\u0085lory",
		"slashes": "a/b/../c",
	} {
		t.Run(name, func(t *testing.T) {
			clock := envoyhost.NewClock(epoch)
			svc := startSpy(t, clock)
			cfg := globalConfig(`{"name":"tokens","scope":"global","key":[{"header":"x-user"}],"limits":[{"rate":"100/m","algorithm":"fixed_window"}],
				"cost":{"header":"x-max-tokens","default":10,"max":100000,"settle":{"response_json":"usage.total_tokens"}}}`)
			p := load(t, attackModule(t), cfg, 2, svc.withIt(clock))
			s, ok := openGlobalReserving(t, p.VM(0), user, 10)
			require.True(t, ok)
			_, err := s.SendResponseHeaders(envoyhost.Headers{{":status", "200"}, {"content-type", "application/json"}}, false)
			require.NoError(t, err)
			_, err = s.SendResponseBody([]byte(`{"usage":{"total_tokens":1000}}`), true)
			require.NoError(t, err)
			require.NoError(t, s.Close())
			settle(t, p)
			ctx, cancel := context.WithTimeout(context.Background(), patience)
			defer cancel()
			_ = ctx
			admitted := 0
			for w := range 12 { // one request a window, for 12 windows
				if s, ok := openGlobalReserving(t, p.VM(w%2), user, 10); ok {
					admitted++
					_, _ = s.SendResponseHeaders(envoyhost.Headers{{":status", "200"}, {"content-type", "application/json"}}, false)
					_, _ = s.SendResponseBody([]byte(`{"usage":{"total_tokens":10}}`), true)
					_ = s.Close()
					settle(t, p)
				}
				advanceSettled(t, clock, time.Minute, p)
			}
			calls := svc.calls()
			for i, b := range calls {
				if i < 3 {
					if len(b) > 300 {
						b = b[:300]
					}
					t.Logf("call %d: %s", i, b)
				}
			}
			t.Logf("%s: after using 1000 of a 10 reservation (100/m), admitted %d of 12 requests in the next 12 windows (expect 2: debt 900 = 9 windows)", name, admitted)
			assert.Equal(t, 2, admitted)
		})
	}
}
