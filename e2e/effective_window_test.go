package e2e

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/internal/envoyhost"
	"github.com/meshlimit/meshlimit/internal/sfv"
)

// quotaSeen is what a client reads of the one policy of a response: the status, r, t and
// Retry-After ("" when there is none).
type quotaSeen struct {
	status int
	r, t   int64
	retry  string
}

func seen(t *testing.T, res envoyhost.Result) quotaSeen {
	t.Helper()
	h := res.Downstream
	if res.LocalReply != nil {
		h = res.LocalReply.Headers
	}
	v, ok := h.Get("ratelimit")
	require.True(t, ok, "a RateLimit field")
	ps, err := sfv.ParsePolicies(v)
	require.NoError(t, err, v)
	require.Len(t, ps, 1)
	retry, _ := h.Get("retry-after")
	return quotaSeen{status(res), ps[0].Params["r"], ps[0].Params["t"], retry}
}

// TestTheCompiledFilterSendsTheEffectiveWindowOfDraft11 runs the compiled module on the fake clock
// (starting at a whole hour) and reads r, t and Retry-After at chosen instants: t is the effective
// window, "the number of seconds within which the client can use no more than the available quota"
// (draft-ietf-httpapi-ratelimit-headers-11, §4.1.2), and Retry-After never ends before it (§6).
func TestTheCompiledFilterSendsTheEffectiveWindowOfDraft11(t *testing.T) {
	type step struct {
		at   time.Duration // after the start
		cost int
		want quotaSeen
	}
	for _, tc := range []struct {
		name  string
		limit string
		steps []step
	}{
		{"a sliding log says when its oldest use expires, not when the quota is full",
			`{"rate":"10/m","algorithm":"sliding_log"}`, []step{
				{0, 3, quotaSeen{200, 7, 60, ""}},
				{25 * time.Second, 5, quotaSeen{200, 2, 35, ""}},   // the first 3 expire at 60 s; full only at 85 s
				{40 * time.Second, 6, quotaSeen{429, 2, 20, "45"}}, // 6 fit at 85 s; one more than 2 at 60 s
				{40 * time.Second, 2, quotaSeen{200, 0, 20, ""}},   // spent: the first 3 expire at 60 s
				{59 * time.Second, 1, quotaSeen{429, 0, 1, "1"}},   // denied until then
				{60 * time.Second, 1, quotaSeen{200, 2, 25, ""}},   // 3 came back; the next 5 (at 25 s) at 85 s
			}},
		{"a token bucket says when its next unit is back",
			`{"rate":"100/h"}`, []step{
				{0, 1, quotaSeen{200, 99, 36, ""}},
				{0, 1, quotaSeen{200, 98, 36, ""}},                   // full in 72 s, the next unit in 36 s
				{10 * time.Second, 40, quotaSeen{200, 58, 26, ""}},   // 42 units out: the first back at 36 s
				{10 * time.Second, 60, quotaSeen{429, 58, 26, "62"}}, // 60 fit only 62 s later
			}},
		{"a token bucket with a burst of 2 denies for the time to its next unit",
			`{"rate":"2/m"}`, []step{
				{0, 2, quotaSeen{200, 0, 30, ""}},
				{10 * time.Second, 1, quotaSeen{429, 0, 20, "20"}},
				{30 * time.Second, 1, quotaSeen{200, 0, 30, ""}},
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := envoyhost.NewClock(epoch)
			cfg := `{"rules":[{"name":"p","key":["client_ip"],"cost":{"header":"x-cost"},"limits":[` + tc.limit + `]}]}`
			p := load(t, module(t, "meshlimit"), cfg, 1, func(c *envoyhost.Config) { c.Clock = clock })
			at := time.Duration(0)
			for i, s := range tc.steps {
				clock.Advance(s.at - at)
				at = s.at
				got := seen(t, roundTrip(t, p.VM(0), get("a.example", "/", "192.0.2.60", [2]string{"x-cost", strconv.Itoa(s.cost)})))
				assert.Equal(t, s.want, got, "step %d: cost %d at %v", i, s.cost, s.at)
				if got.retry != "" {
					retry, err := strconv.ParseInt(got.retry, 10, 64)
					require.NoError(t, err)
					assert.GreaterOrEqual(t, retry, got.t, "step %d: Retry-After is never earlier than the end of the effective window", i)
				}
			}
		})
	}
}

// TestEffectiveWindowJitterReachesTheClientAndRetryAfterStaysAfterIt: with effective_window_jitter
// every t the compiled filter sends is 0 to 5 s longer than the effective window, and Retry-After is
// never earlier than it.
func TestEffectiveWindowJitterReachesTheClientAndRetryAfterStaysAfterIt(t *testing.T) {
	clock := envoyhost.NewClock(epoch)
	p := load(t, module(t, "meshlimit"), `{"response":{"effective_window_jitter":"5s"},
		"rules":[{"name":"p","key":["client_ip"],"limits":[{"rate":"2/m"}]}]}`, 1, func(c *envoyhost.Config) { c.Clock = clock })
	ts := map[int64]bool{}
	for i := range 40 {
		ip := "192.0.2." + strconv.Itoa(i+1)
		first := seen(t, roundTrip(t, p.VM(0), get("a.example", "/", ip)))
		assert.True(t, first.t >= 30 && first.t <= 35, "r=1: the next unit in 30 s, plus 0 to 5: %d", first.t)
		ts[first.t] = true
		roundTrip(t, p.VM(0), get("a.example", "/", ip))
		denied := seen(t, roundTrip(t, p.VM(0), get("a.example", "/", ip)))
		require.Equal(t, 429, denied.status)
		retry, err := strconv.ParseInt(denied.retry, 10, 64)
		require.NoError(t, err)
		assert.True(t, denied.t >= 30 && denied.t <= 35, "denied: %d", denied.t)
		assert.GreaterOrEqual(t, retry, denied.t)
	}
	assert.Greater(t, len(ts), 1, "the jitter varies between responses")
}

// TestAGlobalRulesTIsTheEffectiveWindowALocalRuleSends runs the same uses of a sliding log and a
// sliding window counter through a local rule and a global one (the real decision service, on the
// same fake clock): the service's answer carries the effective window (effective_ms), so the
// client reads the same r, t and Retry-After from both, not the time until the quota is full.
func TestAGlobalRulesTIsTheEffectiveWindowALocalRuleSends(t *testing.T) {
	type step struct {
		at   time.Duration
		cost int
	}
	for _, tc := range []struct {
		name  string
		limit string
		steps []step
	}{
		{"a sliding log", `{"rate":"10/m","algorithm":"sliding_log"}`,
			[]step{{0, 3}, {25 * time.Second, 5}, {40 * time.Second, 6}, {40 * time.Second, 2}, {59 * time.Second, 1}, {60 * time.Second, 1}}},
		{"a sliding window counter", `{"rate":"10/m","algorithm":"sliding_window"}`,
			[]step{{0, 3}, {25 * time.Second, 2}, {70 * time.Second, 4}, {80 * time.Second, 9}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A global denial is remembered (cache_denials) and answered in the proxy until its
			// Retry-After: off, so that every step asks the service.
			extra := map[string]string{"local": ``, "global": `,"cache_denials":false`}
			run := func(scope string) []quotaSeen {
				clock := envoyhost.NewClock(epoch)
				svc := startService(t, clock)
				rule := `{"name":"p","scope":"` + scope + `","key":["client_ip"],"cost":{"header":"x-cost"},"limits":[` + tc.limit + `]` + extra[scope] + `}`
				p := load(t, module(t, "meshlimit"), globalConfig(rule), 1, withService(svc, nil), func(c *envoyhost.Config) { c.Clock = clock })
				var out []quotaSeen
				at := time.Duration(0)
				for _, s := range tc.steps {
					clock.Advance(s.at - at)
					at = s.at
					out = append(out, seen(t, roundTrip(t, p.VM(0), get("a.example", "/", "192.0.2.62", [2]string{"x-cost", strconv.Itoa(s.cost)}))))
				}
				return out
			}
			local, global := run("local"), run("global")
			assert.Equal(t, local, global)
		})
	}
}
