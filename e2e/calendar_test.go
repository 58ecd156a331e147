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

// calendarSeen is what a client reads of a calendar quota's one policy: the status, w, r, t and
// Retry-After ("" when there is none).
type calendarSeen struct {
	status  int
	w, r, t int64
	retry   string
}

func calendarOf(t *testing.T, res envoyhost.Result) calendarSeen {
	t.Helper()
	q := seen(t, res)
	h := res.Downstream
	if res.LocalReply != nil {
		h = res.LocalReply.Headers
	}
	v, ok := h.Get("ratelimit-policy")
	require.True(t, ok, "a RateLimit-Policy field")
	ps, err := sfv.ParsePolicies(v)
	require.NoError(t, err, v)
	return calendarSeen{q.status, ps[0].Params["w"], q.r, q.t, q.retry}
}

// TestTheCompiledFilterRenewsCalendarQuotasAtThePeriodsRealEnd runs the compiled module on the fake
// clock across calendar boundaries: the quota comes back at the period's start, and w, t and
// Retry-After follow the real length of the period at hand.
func TestTheCompiledFilterRenewsCalendarQuotasAtThePeriodsRealEnd(t *testing.T) {
	const day = 86400
	type step struct {
		at   string // RFC 3339; the first is the clock's start
		want calendarSeen
	}
	for _, tc := range []struct {
		name  string
		limit string
		steps []step
	}{
		{"a monthly quota spent on 31 January is back on 1 February, whose w is 28 days",
			`{"rate":"2/month"}`, []step{
				{"2026-01-31T23:59:30Z", calendarSeen{200, 31 * day, 1, 30, ""}},
				{"2026-01-31T23:59:30Z", calendarSeen{200, 31 * day, 0, 30, ""}},
				{"2026-01-31T23:59:45Z", calendarSeen{429, 31 * day, 0, 15, "15"}},
				{"2026-02-01T00:00:00Z", calendarSeen{200, 28 * day, 1, 28 * day, ""}},
			}},
		{"February of a leap year lasts 29 days, and March comes after the 29th",
			`{"rate":"1/month"}`, []step{
				{"2028-02-28T23:00:00Z", calendarSeen{200, 29 * day, 0, day + 3600, ""}},
				{"2028-02-29T23:59:59Z", calendarSeen{429, 29 * day, 0, 1, "1"}},
				{"2028-03-01T00:00:00Z", calendarSeen{200, 31 * day, 0, 31 * day, ""}},
			}},
		{"a yearly quota of a leap year ends on 31 December, and the next year has 365 days",
			`{"rate":"1/year"}`, []step{
				{"2028-12-31T23:59:00Z", calendarSeen{200, 366 * day, 0, 60, ""}},
				{"2028-12-31T23:59:00Z", calendarSeen{429, 366 * day, 0, 60, "60"}},
				{"2029-01-01T00:00:00Z", calendarSeen{200, 365 * day, 0, 365 * day, ""}},
			}},
		{"an ISO week ends on Sunday night",
			`{"rate":"1/week"}`, []step{
				{"2026-01-04T23:59:00Z", calendarSeen{200, 7 * day, 0, 60, ""}}, // a Sunday
				{"2026-01-04T23:59:00Z", calendarSeen{429, 7 * day, 0, 60, "60"}},
				{"2026-01-05T00:00:00Z", calendarSeen{200, 7 * day, 0, 7 * day, ""}},
			}},
		{"a month at UTC−08:00 ends at 08:00 UTC on the 1st",
			`{"rate":"1/month","calendar_offset":"-08:00"}`, []step{
				{"2026-03-01T07:59:00Z", calendarSeen{200, 28 * day, 0, 60, ""}}, // 28 February, 23:59 local
				{"2026-03-01T07:59:00Z", calendarSeen{429, 28 * day, 0, 60, "60"}},
				{"2026-03-01T08:00:00Z", calendarSeen{200, 31 * day, 0, 31 * day, ""}},
			}},
		{"a day at UTC+05:30 ends at 18:30 UTC",
			`{"rate":"1/day","calendar_offset":"+05:30"}`, []step{
				{"2026-03-10T18:29:00Z", calendarSeen{200, day, 0, 60, ""}},
				{"2026-03-10T18:29:00Z", calendarSeen{429, day, 0, 60, "60"}},
				{"2026-03-10T18:30:00Z", calendarSeen{200, day, 0, day, ""}},
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			times := make([]time.Time, len(tc.steps))
			for i, s := range tc.steps {
				var err error
				times[i], err = time.Parse(time.RFC3339, s.at)
				require.NoError(t, err)
			}
			clock := envoyhost.NewClock(times[0])
			cfg := `{"rules":[{"name":"plan","key":["client_ip"],"limits":[` + tc.limit + `]}]}`
			p := load(t, module(t, "meshlimit"), cfg, 1, func(c *envoyhost.Config) { c.Clock = clock })
			for i, s := range tc.steps {
				clock.Advance(times[i].Sub(clock.Now()))
				got := calendarOf(t, roundTrip(t, p.VM(0), get("a.example", "/", "192.0.2.61")))
				assert.Equal(t, s.want, got, "step %d at %s", i, s.at)
				if got.retry != "" {
					retry, err := strconv.ParseInt(got.retry, 10, 64)
					require.NoError(t, err)
					assert.GreaterOrEqual(t, retry, got.t, "step %d: Retry-After is never earlier than the end of the effective window", i)
				}
			}
		})
	}
}

// TestAGlobalCalendarQuotaAnswersAsTheLocalOne runs the same requests through a local monthly quota
// and a global one (the real decision service on the same fake clock) across a month end at a
// fixed offset: the client reads the same status, w, r, t and Retry-After from both.
func TestAGlobalCalendarQuotaAnswersAsTheLocalOne(t *testing.T) {
	start := time.Date(2026, 1, 31, 21, 59, 0, 0, time.UTC) // 23:59 at +02:00
	steps := []time.Duration{0, 0, 30 * time.Second, 60 * time.Second, 60 * time.Second, 61 * time.Second}
	run := func(scope, extra string) []calendarSeen {
		clock := envoyhost.NewClock(start)
		svc := startService(t, clock)
		rule := `{"name":"plan","scope":"` + scope + `","key":["client_ip"],"limits":[{"rate":"2/month","calendar_offset":"+02:00"}]` + extra + `}`
		p := load(t, module(t, "meshlimit"), globalConfig(rule), 1, withService(svc, nil), func(c *envoyhost.Config) { c.Clock = clock })
		var out []calendarSeen
		for _, at := range steps {
			clock.Advance(start.Add(at).Sub(clock.Now()))
			out = append(out, calendarOf(t, roundTrip(t, p.VM(0), get("a.example", "/", "192.0.2.63"))))
		}
		return out
	}
	local := run("local", ``)
	// A global denial is remembered (cache_denials) and answered in the proxy: off, so that every
	// step asks the service.
	global := run("global", `,"cache_denials":false`)
	const day = 86400
	assert.Equal(t, []calendarSeen{
		{200, 31 * day, 1, 60, ""}, {200, 31 * day, 0, 60, ""}, {429, 31 * day, 0, 30, "30"},
		{200, 28 * day, 1, 28 * day, ""}, {200, 28 * day, 0, 28 * day, ""}, {429, 28 * day, 0, 28*day - 1, strconv.Itoa(28*day - 1)},
	}, local)
	assert.Equal(t, local, global)
}
