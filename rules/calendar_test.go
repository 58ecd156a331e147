package rules

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/algorithms"
)

// calendarDoc is a configuration with one local rule whose one limit is limit (a JSON object).
func calendarDoc(limit string) string {
	return `{"rules":[{"name":"r","key":["client_ip"],"limits":[` + limit + `]}]}`
}

func TestACalendarRateCompilesToAFixedWindowAlignedToThatPeriod(t *testing.T) {
	for _, tc := range []struct {
		name  string
		limit string
		want  algorithms.Limit
	}{
		{"a monthly quota takes the fixed window when no algorithm is given",
			`{"rate":"10000/month"}`, algorithms.Limit{Kind: algorithms.FixedWindow, Quota: 10000, Calendar: algorithms.Calendar{Unit: algorithms.CalendarMonth}}},
		{"a daily quota may name fixed_window",
			`{"rate":"500/day","algorithm":"fixed_window"}`, algorithms.Limit{Kind: algorithms.FixedWindow, Quota: 500, Calendar: algorithms.Calendar{Unit: algorithms.CalendarDay}}},
		{"an ISO weekly quota with a fixed offset east of UTC",
			`{"rate":"7/week","calendar_offset":"+02:00"}`, algorithms.Limit{Kind: algorithms.FixedWindow, Quota: 7, Calendar: algorithms.Calendar{Unit: algorithms.CalendarWeek, Offset: 2 * time.Hour}}},
		{"a yearly quota with an offset west of UTC",
			`{"rate":"1000000/year","calendar_offset":"-08:30"}`, algorithms.Limit{Kind: algorithms.FixedWindow, Quota: 1000000, Calendar: algorithms.Calendar{Unit: algorithms.CalendarYear, Offset: -8*time.Hour - 30*time.Minute}}},
		{"Z is UTC",
			`{"rate":"3/month","calendar_offset":"Z"}`, algorithms.Limit{Kind: algorithms.FixedWindow, Quota: 3, Calendar: algorithms.Calendar{Unit: algorithms.CalendarMonth}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := mustParse(t, calendarDoc(tc.limit)).Rules()[0].limits()[0].Limit
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestABadCalendarLimitIsRefusedAtTheFieldThatIsWrong(t *testing.T) {
	for _, tc := range []struct {
		name, doc, path, msg string
	}{
		{"a token bucket cannot count a calendar month", calendarDoc(`{"rate":"10/month","algorithm":"token_bucket"}`),
			"rules[0].limits[0].algorithm", "needs fixed_window"},
		{"a sliding window cannot count a calendar day", calendarDoc(`{"rate":"10/day","algorithm":"sliding_window"}`),
			"rules[0].limits[0].algorithm", "needs fixed_window"},
		{"a calendar window takes no burst", calendarDoc(`{"rate":"10/week","burst":5}`),
			"rules[0].limits[0].burst", "not a calendar window"},
		{"a calendar rate needs a positive quota", calendarDoc(`{"rate":"0/month"}`),
			"rules[0].limits[0].rate", "quota must be a positive integer"},
		{"an offset needs a calendar rate", calendarDoc(`{"rate":"10/h","calendar_offset":"+01:00"}`),
			"rules[0].limits[0].calendar_offset", "only a calendar rate"},
		{"an offset is ±hh:mm", calendarDoc(`{"rate":"10/month","calendar_offset":"+2"}`),
			"rules[0].limits[0].calendar_offset", "want \"Z\" or ±hh:mm"},
		{"an offset beyond 18 hours is refused", calendarDoc(`{"rate":"10/month","calendar_offset":"+19:00"}`),
			"rules[0].limits[0].calendar_offset", "at most 18:00"},
		{"an offset's minutes are below 60", calendarDoc(`{"rate":"10/month","calendar_offset":"+01:60"}`),
			"rules[0].limits[0].calendar_offset", "minutes below 60"},
		{"an unknown calendar-looking unit is an unknown unit", calendarDoc(`{"rate":"10/months"}`),
			"rules[0].limits[0].rate", "unknown unit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseConfig([]byte(tc.doc))
			require.Error(t, err)
			found := false
			for _, fe := range fieldErrors(t, err) {
				if fe.Path == tc.path {
					assert.Contains(t, fe.Msg, tc.msg)
					found = true
				}
			}
			assert.True(t, found, "an error at %s, got %v", tc.path, err)
		})
	}
}

// TestAnOffsetOnAConcurrencyLimitOrAnEmptyOffsetIsRefusedNamingTheField: review 23 found a concurrency
// limit loaded with calendar_offset "garbage", and "" accepted on every limit; null stays "unset".
func TestAnOffsetOnAConcurrencyLimitOrAnEmptyOffsetIsRefusedNamingTheField(t *testing.T) {
	const field = "rules[0].limits[0].calendar_offset"
	for _, tc := range []struct{ name, limit, msg string }{
		{"a concurrency limit takes no offset", `{"concurrency":3,"calendar_offset":"garbage"}`, "a concurrency limit takes no calendar_offset"},
		{"not even a valid one", `{"concurrency":3,"calendar_offset":"+02:00"}`, "a concurrency limit takes no calendar_offset"},
		{"an empty offset on a rolling rate", `{"rate":"1/d","calendar_offset":""}`, "only a calendar rate"},
		{"an empty offset on a calendar rate", `{"rate":"1/month","calendar_offset":""}`, "omit it for UTC"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseConfig([]byte(calendarDoc(tc.limit)))
			require.Error(t, err)
			fes := fieldErrors(t, err)
			require.Len(t, fes, 1, "%v", err)
			assert.Equal(t, field, fes[0].Path)
			assert.Contains(t, fes[0].Msg, tc.msg)
		})
	}
	t.Run("a null offset is no offset", func(t *testing.T) {
		got := mustParse(t, calendarDoc(`{"rate":"1/month","calendar_offset":null}`)).Rules()[0].limits()[0].Limit
		assert.Equal(t, algorithms.Calendar{Unit: algorithms.CalendarMonth}, got.Calendar)
	})
}

// TestAnUnknownRateUnitsErrorListsTheCalendarUnits: the error names every unit a rate takes.
func TestAnUnknownRateUnitsErrorListsTheCalendarUnits(t *testing.T) {
	_, err := ParseConfig([]byte(calendarDoc(`{"rate":"10/fortnight"}`)))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "want s, m, h, d, day, week, month, year, or a duration")
}

func TestAGlobalRuleAndItsOverridesCountCalendarQuotasToo(t *testing.T) {
	c := mustParse(t, `{"global":{"cluster":"outbound|8081||svc.ns.svc.cluster.local"},"rules":[{"name":"r","scope":"both","key":["client_ip"],
		"limits":[{"rate":"10/month","calendar_offset":"+02:00"}],"overrides":[{"value":"192.0.2.1","limits":[{"rate":"5/day"}]}]}]}`)
	r := c.Rules()[0]
	assert.Equal(t, algorithms.Calendar{Unit: algorithms.CalendarMonth, Offset: 2 * time.Hour}, r.limits()[0].Limit.Calendar)
	set, _ := r.Limits([]byte("192.0.2.1"))
	assert.Equal(t, algorithms.CalendarDay, set.Limits[0].Limit.Calendar.Unit)
}

func TestTheCalendarAndItsOffsetAreInTheLimitFingerprint(t *testing.T) {
	fp := func(limit string) uint64 { return mustParse(t, calendarDoc(limit)).Rules()[0].limits()[0].Fingerprint }
	month, utc2 := fp(`{"rate":"10/month"}`), fp(`{"rate":"10/month","calendar_offset":"+02:00"}`)
	assert.NotEqual(t, month, fp(`{"rate":"10/year"}`))
	assert.NotEqual(t, month, utc2)
	assert.Equal(t, month, fp(`{"rate":"10/month","calendar_offset":"Z"}`))
	assert.Equal(t, limitFingerprint(algorithms.Limit{Kind: algorithms.FixedWindow, Quota: 10, Window: time.Hour}),
		fp(`{"rate":"10/h","algorithm":"fixed_window"}`), "a rolling window hashes as before")
}

// at returns the unix nanoseconds of an RFC 3339 time.
func at(t *testing.T, s string) int64 {
	t.Helper()
	tm, err := time.Parse(time.RFC3339, s)
	require.NoError(t, err)
	return tm.UnixNano()
}

// TestACalendarPolicysWIsTheRealLengthOfThePeriodAtHand decides a calendar limit at chosen instants
// and renders the answer: w is the length of the period the decision fell in, t and Retry-After the
// time to its end.
func TestACalendarPolicysWIsTheRealLengthOfThePeriodAtHand(t *testing.T) {
	const day = 86400
	for _, tc := range []struct {
		name, limit, now string
		w, t             int64
	}{
		{"January has 31 days", `{"rate":"2/month"}`, "2026-01-31T23:59:00Z", 31 * day, 60},
		{"February of a common year has 28", `{"rate":"2/month"}`, "2026-02-01T00:00:00Z", 28 * day, 28 * day},
		{"February of a leap year has 29", `{"rate":"2/month"}`, "2028-02-28T00:00:00Z", 29 * day, 2 * day},
		{"a leap year has 366 days", `{"rate":"2/year"}`, "2028-12-31T23:00:00Z", 366 * day, 3600},
		{"a common year has 365", `{"rate":"2/year"}`, "2027-01-01T00:00:01Z", 365 * day, 365*day - 1},
		{"an ISO week ends on Monday", `{"rate":"2/week"}`, "2026-01-01T12:00:00Z", 7 * day, 4*day - 12*3600}, // a Thursday
		{"an offset moves the month's end", `{"rate":"2/month","calendar_offset":"+02:00"}`, "2026-01-31T21:59:00Z", 31 * day, 60},
		{"past it, the next month has begun", `{"rate":"2/month","calendar_offset":"+02:00"}`, "2026-01-31T22:00:00Z", 28 * day, 28 * day},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := mustParse(t, calendarDoc(tc.limit))
			spec := &c.Rules()[0].limits()[0]
			now := at(t, tc.now)
			var state []byte
			var d algorithms.Decision
			for range 3 { // the third is denied
				var err error
				state, d, err = spec.Limit.Decide(state, now, 1, nil)
				require.NoError(t, err)
			}
			require.False(t, d.Allowed)
			var lr LocalResponse
			c.Response.Deny(&lr, nil, []Outcome{{Limit: spec, Decision: d, Period: spec.PeriodAt(now)}}, false, 0)
			pol, _ := header(t, lr.Headers, HeaderRateLimitPolicy)
			rl, _ := header(t, lr.Headers, HeaderRateLimit)
			retry, _ := header(t, lr.Headers, HeaderRetryAfter)
			assert.Equal(t, tc.w, parsePolicies(t, pol)[0].params["w"], pol)
			assert.Equal(t, tc.t, parsePolicies(t, rl)[0].params["t"], rl)
			assert.Equal(t, strconv.FormatInt(tc.t, 10), retry, "Retry-After is the period's end")
		})
	}
}

func TestExplainWritesACalendarRateAsConfigured(t *testing.T) {
	lines, err := Explain([]byte(calendarDoc(`{"rate":"10000/month","calendar_offset":"+02:00","name":"monthly"}`)))
	require.NoError(t, err)
	assert.Contains(t, strings.Join(lines, "\n"), "monthly: 10000/month UTC+02:00 fixed_window")
}

// BenchmarkQuotaFieldsOfOneLimit renders an allowed request's quota fields for one limit: a rolling
// window copies the policy member rendered at compile time, a calendar window renders it with the
// period at hand (Outcome.Period, computed here as the filter does).
func BenchmarkQuotaFieldsOfOneLimit(b *testing.B) {
	now := time.Date(2026, 2, 14, 12, 0, 0, 0, time.UTC).UnixNano()
	for _, bc := range []struct{ name, limit string }{
		{"rolling hour", `{"rate":"10000/h","algorithm":"fixed_window"}`},
		{"calendar month", `{"rate":"10000/month","calendar_offset":"+02:00"}`},
	} {
		b.Run(bc.name, func(b *testing.B) {
			c := mustParse(b, calendarDoc(bc.limit))
			spec := &c.Rules()[0].limits()[0]
			d := algorithms.Decision{Allowed: true, Limit: 10000, Remaining: 9999, Reset: time.Hour, EffectiveWindow: time.Hour}
			fields, buf := make([]Field, 0, 4), make([]byte, 0, 256)
			outcomes := make([]Outcome, 1)
			b.ReportAllocs()
			for b.Loop() {
				outcomes[0] = Outcome{Limit: spec, Decision: d, Period: spec.PeriodAt(now)}
				fields, buf = c.Response.AppendAllowed(fields[:0], buf[:0], outcomes, 0)
			}
		})
	}
}

// TestALimitsLongestWaitIsItsPeriodsEndOrItsTTL: what bounds the service's answers (LongestWait).
func TestALimitsLongestWaitIsItsPeriodsEndOrItsTTL(t *testing.T) {
	monthEnd := time.Date(2026, 1, 31, 23, 59, 0, 0, time.UTC).UnixNano()
	for _, tc := range []struct {
		name, limit string
		now         int64
		settles     bool
		want        time.Duration
	}{
		{"a monthly quota a minute before the month ends", `{"rate":"10/month"}`, monthEnd, false, time.Minute},
		{"a monthly quota at +02:00, a minute before the month ends there", `{"rate":"10/month","calendar_offset":"+02:00"}`, monthEnd - int64(2*time.Hour), false, time.Minute},
		{"a monthly quota past 2^52 µs, where time stops: the longest month", `{"rate":"10/month"}`, time.Date(2113, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano(), false, 31 * 24 * time.Hour},
		{"a 10/m token bucket: its full refill", `{"rate":"10/m"}`, monthEnd, false, time.Minute},
		{"a 10/m token bucket of a rule that settles: 65 refills, for a debt of 64 capacities", `{"rate":"10/m"}`, monthEnd, true, 65 * time.Minute},
		{"a monthly quota of a rule that settles: the period's end and 64 longest months, for a debt of 64 quotas", `{"rate":"10/month"}`, monthEnd, true, time.Minute + 64*31*24*time.Hour},
		{"a fixed window of a rule that settles: 65 windows, for a debt of 64 quotas", `{"rate":"10/m","algorithm":"fixed_window"}`, monthEnd, true, 65 * time.Minute},
		{"a 10/m bucket of burst 20: two windows", `{"rate":"10/m","burst":20}`, monthEnd, false, 2 * time.Minute},
		{"a sliding window counter: two windows", `{"rate":"10/h","algorithm":"sliding_window"}`, monthEnd, false, 2 * time.Hour},
		{"a concurrency limit: none", `{"concurrency":3}`, monthEnd, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := mustParse(t, calendarDoc(tc.limit)).Rules()[0].limits()[0]
			assert.Equal(t, tc.want, spec.LongestWait(tc.now, tc.settles))
		})
	}
}

func TestLongestWaitAllocatesNothing(t *testing.T) {
	for _, limit := range []string{`{"rate":"10/month","calendar_offset":"+02:00"}`, `{"rate":"10/m","burst":20}`, `{"concurrency":3}`} {
		spec := mustParse(t, calendarDoc(limit)).Rules()[0].limits()[0]
		now := time.Date(2026, 1, 31, 23, 59, 0, 0, time.UTC).UnixNano()
		assert.Zero(t, testing.AllocsPerRun(100, func() { _ = spec.LongestWait(now, true) }), limit)
	}
}
