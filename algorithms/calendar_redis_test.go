//go:build !wasip1

package algorithms

import (
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/internal/redistest"
)

// The drivers appended to testdata/calendar.lua: ARGV holds the unit, the offset and then the
// cases; the reply is one string of the results, each an exact integer (%.0f), space-separated.
const (
	luaPeriodDriver = `
local unit, o, out = tonumber(ARGV[1]), tonumber(ARGV[2]), {}
for i = 3, #ARGV do
  local s, e = calendar_period(unit, o, tonumber(ARGV[i]))
  out[#out + 1] = string.format('%.0f %.0f', s, e)
end
return table.concat(out, ' ')
`
	luaPositionDriver = `
local unit, o, out = tonumber(ARGV[1]), tonumber(ARGV[2]), {}
for i = 3, #ARGV, 3 do
  local s, e, m = calendar_position(unit, o, tonumber(ARGV[i]), tonumber(ARGV[i + 2]))
  local a = calendar_start(unit, o, calendar_index(unit, o, s) + tonumber(ARGV[i + 1]))
  out[#out + 1] = string.format('%.0f %.0f %.0f %.0f', s, e, m, a)
end
return table.concat(out, ' ')
`
)

// thin returns at most n elements of xs, evenly spread, keeping the first four (of the instants:
// the epoch, 1 µs and the two latest, see calendarEdges).
func thin[T any](xs []T, n int) []T {
	if len(xs) <= n {
		return xs
	}
	out := append([]T(nil), xs[:4]...)
	for i := 4; i < len(xs); i += (len(xs) + n - 1) / n {
		out = append(out, xs[i])
	}
	return out
}

// evalCalendar runs testdata/calendar.lua followed by driver on r with the given arguments and
// returns the integers of its reply.
func evalCalendar(t *testing.T, r *redistest.Server, lua, driver string, args []int64) []int64 {
	t.Helper()
	cmd := []string{"EVAL", lua + driver, "0"}
	for _, a := range args {
		cmd = append(cmd, strconv.FormatInt(a, 10))
	}
	reply, err := r.Do(cmd...)
	require.NoError(t, err)
	fields := strings.Fields(reply)
	out := make([]int64, len(fields))
	for i, f := range fields {
		out[i], err = strconv.ParseInt(f, 10, 64)
		require.NoError(t, err, "reply field %q", f)
	}
	return out
}

// TestCalendarLuaOnRedis runs testdata/calendar.lua itself on a real redis-server (Lua 5.1 in
// doubles, as the service's scripts run) and checks it against Go on an even sample of the cases
// of TestCalendarLuaInDoubles (period edges from the epoch to 2^52 µs, the first and last
// instants, stored states placed before, in and after their period) at five offsets.
// TestCalendarLuaInDoubles runs them all, on the transcription; this test shows the file is it.
func TestCalendarLuaOnRedis(t *testing.T) {
	src, err := os.ReadFile("testdata/calendar.lua")
	require.NoError(t, err)
	lua := string(src)
	srv := redistest.Start(t)
	r := rand.New(rand.NewPCG(23, 2))
	for _, u := range CalendarUnits {
		for _, o := range calendarOffsets[:5] { // UTC, +05:30, +05:45, -09:30, -08:00
			c := Calendar{Unit: u, Offset: o}
			l := Limit{Kind: FixedWindow, Quota: MaxQuota, Calendar: c}
			head := []int64{int64(u), int64(o / time.Microsecond)}
			nows, states := calendarCases(c, r)
			nows, states = thin(nows, 2000), thin(states, 2000) // about 12 µs a case on Redis

			got := evalCalendar(t, srv, lua, luaPeriodDriver, append(head, nows...))
			require.Len(t, got, 2*len(nows), "%v", c)
			for i, n := range nows {
				s, e := c.periodUs(n)
				if got[2*i] != s || got[2*i+1] != e {
					t.Fatalf("%v at %d µs: Lua on Redis [%d, %d), Go [%d, %d)", c, n, got[2*i], got[2*i+1], s, e)
				}
			}

			args := head
			for _, st := range states {
				args = append(args, st[:]...)
			}
			got = evalCalendar(t, srv, lua, luaPositionDriver, args)
			require.Len(t, got, 4*len(states), "%v", c)
			for i, st := range states {
				s, e, m := l.placeFixed(st[0], st[2])
				a := l.windowAfter(s, st[1])
				if g := got[4*i:]; g[0] != s || g[1] != e || g[2] != m || g[3] != a {
					t.Fatalf("%v: start %d at %d µs, period %d after: Lua on Redis %v, Go (%d, %d, %d, %d)",
						c, st[0], st[2], st[1], g[:4], s, e, m, a)
				}
			}
		}
	}
}
