package algorithms

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// calStep is one request of a calendar timeline at an RFC 3339 instant, and what Decide must
// answer: wantWait is the RetryAfter when denied, wantReset the Reset.
type calStep struct {
	at            string
	cost          int64
	wantAllowed   bool
	wantRemaining int64
	wantWait      time.Duration
	wantReset     time.Duration
}

const day = 24 * time.Hour

func TestCalendarTimelines(t *testing.T) {
	month := Limit{Kind: FixedWindow, Quota: 3, Calendar: Calendar{Unit: CalendarMonth}}
	tests := []struct {
		name  string
		limit Limit
		steps []calStep
	}{
		{"a monthly quota renews on the 1st and a denial waits for it", month, []calStep{
			{"2026-01-31T10:00:00Z", 3, true, 0, 0, 14 * time.Hour},
			{"2026-01-31T23:59:59.999999Z", 1, false, 0, us, us},
			{"2026-02-01T00:00:00Z", 1, true, 2, 0, 28 * day},
			{"2026-02-14T00:00:00Z", 2, true, 0, 0, 15 * day},
			{"2026-02-14T00:00:00Z", 1, false, 0, 15 * day, 15 * day},
			{"2026-03-01T00:00:00Z", 3, true, 0, 0, 31 * day},
		}},
		{"a denial on 1 February 2024 waits the 29 days of a leap February", month, []calStep{
			{"2024-02-01T00:00:00Z", 3, true, 0, 0, 29 * day},
			{"2024-02-01T00:00:00Z", 1, false, 0, 29 * day, 29 * day},
			{"2024-02-29T23:59:59Z", 1, false, 0, time.Second, time.Second},
			{"2024-03-01T00:00:00Z", 1, true, 2, 0, 31 * day},
		}},
		{"a denial on 1 February 2100 waits 28 days: 2100 is not a leap year", month, []calStep{
			{"2100-02-01T00:00:00Z", 3, true, 0, 0, 28 * day},
			{"2100-02-01T00:00:00Z", 1, false, 0, 28 * day, 28 * day},
		}},
		{"a yearly quota denied on 31 December renews on 1 January",
			Limit{Kind: FixedWindow, Quota: 2, Calendar: Calendar{Unit: CalendarYear}}, []calStep{
				{"2024-01-01T00:00:00Z", 1, true, 1, 0, 366 * day},
				{"2024-12-31T12:00:00Z", 1, true, 0, 0, 12 * time.Hour},
				{"2024-12-31T12:00:00Z", 1, false, 0, 12 * time.Hour, 12 * time.Hour},
				{"2025-01-01T00:00:00Z", 2, true, 0, 0, 365 * day},
			}},
		{"a daily quota at -08:00 renews at 08:00 UTC",
			Limit{Kind: FixedWindow, Quota: 3, Calendar: Calendar{Unit: CalendarDay, Offset: -8 * time.Hour}}, []calStep{
				{"2026-05-14T07:00:00Z", 3, true, 0, 0, time.Hour},
				{"2026-05-14T07:30:00Z", 1, false, 0, 30 * time.Minute, 30 * time.Minute},
				{"2026-05-14T08:00:00Z", 1, true, 2, 0, day},
			}},
		{"a weekly quota at +05:30 renews on Sunday at 18:30 UTC, Monday 00:00 local",
			Limit{Kind: FixedWindow, Quota: 1, Calendar: Calendar{Unit: CalendarWeek, Offset: 5*time.Hour + 30*time.Minute}}, []calStep{
				{"2026-05-17T18:00:00Z", 1, true, 0, 0, 30 * time.Minute},
				{"2026-05-17T18:29:59Z", 1, false, 0, time.Second, time.Second},
				{"2026-05-17T18:30:00Z", 1, true, 0, 0, 7 * day},
			}},
		{"a clock that steps back into the previous month stays in the current one", month, []calStep{
			{"2026-03-01T00:00:00Z", 3, true, 0, 0, 31 * day},
			{"2026-02-28T23:00:00Z", 1, false, 0, 31*day + time.Hour, 31*day + time.Hour},
			{"2026-03-02T00:00:00Z", 1, false, 0, 30 * day, 30 * day},
		}},
		{"a cost above the quota is denied for good at a month end", month, []calStep{
			{"2026-04-30T23:59:59Z", 4, false, 3, RetryNever, 0},
			{"2026-04-30T23:59:59Z", 3, true, 0, 0, time.Second},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.NoError(t, tc.limit.Validate())
			var state []byte
			for i, s := range tc.steps {
				next, d, err := tc.limit.Decide(state, rfc(t, s.at)*nsPerUs, s.cost, nil)
				require.NoError(t, err, "step %d", i)
				assert.Equal(t, s.wantAllowed, d.Allowed, "step %d (%s): allowed", i, s.at)
				assert.Equal(t, s.wantRemaining, d.Remaining, "step %d (%s): remaining", i, s.at)
				assert.Equal(t, s.wantWait, d.RetryAfter, "step %d (%s): retry after", i, s.at)
				assert.Equal(t, s.wantReset, d.Reset, "step %d (%s): reset", i, s.at)
				state = next
			}
		})
	}
}

// A calendar window keeps the fixed window's state layout (0x13, start, count), so a limit that
// moves between a rolling window and a calendar keeps what it counted in the window that is still
// current, and starts fresh when the stored window is over.
func TestAStateKeepsItsCountAcrossARollingAndACalendarWindow(t *testing.T) {
	rolling := Limit{Kind: FixedWindow, Quota: 10, Window: 24 * time.Hour}
	daily := Limit{Kind: FixedWindow, Quota: 10, Calendar: Calendar{Unit: CalendarDay}}
	monthly := Limit{Kind: FixedWindow, Quota: 10, Calendar: Calendar{Unit: CalendarMonth}}
	morning := rfc(t, "2026-05-14T09:00:00Z") * nsPerUs
	state, _, err := rolling.Decide(nil, morning, 4, nil)
	require.NoError(t, err)

	_, d, err := daily.Decide(state, morning+int64(time.Hour), 1, nil)
	require.NoError(t, err)
	assert.Equal(t, int64(5), d.Remaining, "a rolling day is the UTC calendar day: the 4 counted stay")
	_, d, err = monthly.Decide(state, morning+int64(time.Hour), 1, nil)
	require.NoError(t, err)
	assert.Equal(t, int64(5), d.Remaining, "the stored day lies in this month: the 4 counted stay")
	_, d, err = monthly.Decide(state, rfc(t, "2026-06-01T00:00:00Z")*nsPerUs, 1, nil)
	require.NoError(t, err)
	assert.Equal(t, int64(9), d.Remaining, "a state of May resets in June")

	state, _, err = monthly.Decide(nil, morning, 6, nil)
	require.NoError(t, err)
	_, d, err = Limit{Kind: FixedWindow, Quota: 10, Window: time.Hour}.Decide(state, morning, 1, nil)
	require.NoError(t, err)
	assert.Equal(t, int64(9), d.Remaining, "a rolling hour finds the month's start long past: fresh")
	_, d, err = Limit{Kind: FixedWindow, Quota: 10, Window: MaxWindow}.Decide(state, morning, 1, nil)
	require.NoError(t, err)
	assert.Equal(t, int64(3), d.Remaining, "a rolling 400 days (2025-11-08 to 2026-12-13) realigns the month's start into its window")
}

func TestACalendarWindowSettlesWithinItsPeriodOnly(t *testing.T) {
	l := Limit{Kind: FixedWindow, Quota: 10, Calendar: Calendar{Unit: CalendarMonth, Offset: -5 * time.Hour}}
	lastHour := rfc(t, "2026-02-01T04:00:00Z") * nsPerUs // 23:00 on 31 January at -05:00
	state, _, err := l.Decide(nil, lastHour, 8, nil)
	require.NoError(t, err)

	refunded, err := l.Adjust(state, lastHour+int64(30*time.Minute), lastHour, -5, nil)
	require.NoError(t, err)
	p, err := l.Peek(refunded, lastHour+int64(30*time.Minute))
	require.NoError(t, err)
	assert.Equal(t, int64(7), p.Remaining, "a refund within January is given back")

	february := lastHour + int64(time.Hour) // 00:00 on 1 February at -05:00
	state, _, err = l.Decide(state, february, 10, nil)
	require.NoError(t, err)
	state, err = l.Adjust(state, february, lastHour, -8, nil)
	require.NoError(t, err)
	p, err = l.Peek(state, february)
	require.NoError(t, err)
	assert.Equal(t, int64(0), p.Remaining, "January's reservation is not refunded into February")

	state, err = l.Adjust(state, february, february, 1_000, nil)
	require.NoError(t, err)
	_, count, err := decodeFixed(state)
	require.NoError(t, err)
	assert.Equal(t, int64((MaxDebt+1)*10), count, "an over-run is carried up to MaxDebt quotas of debt")
	march := rfc(t, "2026-03-01T05:00:00Z") * nsPerUs
	_, d, err := l.Decide(state, march, 10, nil)
	require.NoError(t, err)
	assert.False(t, d.Allowed, "the debt is carried into March")
	july2031 := rfc(t, "2031-07-01T05:00:00Z") * nsPerUs // February 2026 and 65 months
	assert.Equal(t, time.Duration(july2031-march), d.RetryAfter, "the debt is paid a quota a month")
	_, d, err = l.Decide(state, july2031, 10, nil)
	require.NoError(t, err)
	assert.True(t, d.Allowed, "the debt ends with June 2031")
}
