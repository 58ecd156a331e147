package redisstore

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/algorithms"
	"github.com/meshlimit/meshlimit/internal/redistest"
)

// The store's calendar.lua is package algorithms' transcription, which algorithms tests against Go
// in doubles and on Redis: the two copies must not drift apart.
func TestTheStoresCalendarScriptIsTheOneAlgorithmsTests(t *testing.T) {
	want, err := os.ReadFile(filepath.Join("..", "..", "algorithms", "testdata", "calendar.lua"))
	require.NoError(t, err)
	got, err := luaFS.ReadFile("lua/calendar.lua")
	require.NoError(t, err)
	assert.Equal(t, string(want), string(got))
}

// calendarEdges are instants just at the end of a period: month ends (31, 30, 28 and 29 days),
// year ends (a leap year's and a common one's), a Sunday night (ISO week), in UTC.
var calendarEdges = []string{
	"2026-01-31T24:00:00Z", "2026-02-28T24:00:00Z", "2028-02-29T24:00:00Z", "2026-04-30T24:00:00Z",
	"2028-12-31T24:00:00Z", "2027-12-31T24:00:00Z", "2026-01-04T24:00:00Z", "2100-02-28T24:00:00Z",
}

func edgeUs(t *testing.T, s string) int64 {
	t.Helper()
	tm, err := time.Parse(time.RFC3339, s[:11]+"00:00:00Z")
	require.NoError(t, err)
	return tm.Add(24 * time.Hour).UnixMicro()
}

// calendarTrace returns n steps of l around edge (µs): steps of up to two hours either way of it
// (and clock steps back), period-long jumps, costs up to twice the quota and settles of
// reservations up to two days old, some over-running by up to 80 quotas (a debt of many periods).
func calendarTrace(r *rand.Rand, l algorithms.Limit, edge int64, n int) []traceStep {
	const hour = int64(time.Hour / time.Microsecond)
	now := edge - r.Int64N(2*hour) - int64(l.Calendar.Offset/time.Microsecond)
	steps := make([]traceStep, n)
	for i := range steps {
		switch p := r.IntN(100); {
		case p < 50:
			now += r.Int64N(hour / 4)
		case p < 60:
			now += r.Int64N(3) // the same µs, or the next: the period's exact edge
		case p < 70:
			now -= r.Int64N(hour)
		case p < 75:
			now += int64(l.Calendar.Unit.MaxLength() / time.Microsecond)
		default:
			now += r.Int64N(10 * hour)
		}
		cost := 1 + r.Int64N(2*l.Quota)
		if r.IntN(3) > 0 {
			cost = 1
		}
		steps[i] = traceStep{nowUs: now, cost: cost}
		if r.IntN(100) < 15 {
			steps[i].delta = 1 + r.Int64N(2*l.Quota)
			if r.IntN(4) == 0 { // a debt of many periods, up to past its ceiling
				steps[i].delta = 1 + r.Int64N(80*l.Quota)
			}
			if r.IntN(2) == 0 {
				steps[i].delta = -steps[i].delta
			}
			steps[i].ageUs = r.Int64N(48 * hour)
		}
	}
	return steps
}

// TestLuaCalendarWindowsMatchAlgorithmsAtPeriodEdges runs traces across the edges of calendar
// periods (month ends, leap Februaries, year ends, ISO weeks), in UTC and at fixed offsets,
// through package algorithms and through the fixed-window scripts on a real redis-server, with
// settles: every decision is identical to the microsecond, its effective window included.
func TestLuaCalendarWindowsMatchAlgorithmsAtPeriodEdges(t *testing.T) {
	t.Parallel()
	store := newStore(t, redistest.Start(t).Addr())
	r := rand.New(rand.NewPCG(uint64(envInt("MESHLIMIT_DIFF_SEED", 20251129)), 23))
	offsets := []time.Duration{0, 2 * time.Hour, -8 * time.Hour, 5*time.Hour + 30*time.Minute, 14 * time.Hour, -12 * time.Hour, algorithms.MaxCalendarOffset, -algorithms.MaxCalendarOffset}
	var decisions, denied atomic.Int64
	id := 0
	for _, u := range algorithms.CalendarUnits {
		for _, o := range offsets {
			for _, e := range calendarEdges {
				l := algorithms.Limit{Kind: algorithms.FixedWindow, Quota: []int64{1, 3, 10, 1000}[r.IntN(4)], Calendar: algorithms.Calendar{Unit: u, Offset: o}}
				require.NoError(t, l.Validate())
				id++
				msg := runDiffTrace(store, algorithms.FixedWindow, 1_000_000+id, l, calendarTrace(r, l, edgeUs(t, e), 40), &decisions, &denied)
				require.Empty(t, msg, "%v at %s", l.Calendar, e)
			}
		}
	}
	t.Logf("%d calendar decisions identical (%d denied)", decisions.Load(), denied.Load())
}
