package algorithms

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// The Lua 5.1 functions of testdata/calendar.lua, transcribed operation for operation in float64
// (Lua's number type), with Lua's floor division math.floor(a / b) and a % b = a − floor(a/b)×b.

func luaFloorDiv(a, b float64) float64 { return math.Floor(a / b) }

func luaDaysFromCivil(y, m, d float64) float64 {
	if m <= 2 {
		y = y - 1
	}
	era := luaFloorDiv(y, 400)
	yoe := y - era*400
	mp := luaMod(m+9, 12)
	doy := luaFloorDiv(153*mp+2, 5) + d - 1
	doe := yoe*365 + luaFloorDiv(yoe, 4) - luaFloorDiv(yoe, 100) + doy
	return era*146097 + doe - 719468
}

func luaCivilFromDays(z float64) (y, m, d float64) {
	z = z + 719468
	era := luaFloorDiv(z, 146097)
	doe := z - era*146097
	yoe := luaFloorDiv(doe-luaFloorDiv(doe, 1460)+luaFloorDiv(doe, 36524)-luaFloorDiv(doe, 146096), 365)
	doy := doe - (365*yoe + luaFloorDiv(yoe, 4) - luaFloorDiv(yoe, 100))
	mp := luaFloorDiv(5*doy+2, 153)
	d = doy - luaFloorDiv(153*mp+2, 5) + 1
	m = luaMod(mp+2, 12) + 1
	y = yoe + era*400
	if m <= 2 {
		y = y + 1
	}
	return y, m, d
}

func luaLeap(y float64) float64 {
	if luaMod(y, 4) == 0 && (luaMod(y, 100) != 0 || luaMod(y, 400) == 0) {
		return 1
	}
	return 0
}

func luaDaysInMonth(y, m float64) float64 {
	if m == 2 {
		return 28 + luaLeap(y)
	}
	return 30 + luaMod(m+luaFloorDiv(m, 8), 2)
}

func luaCalendarPeriod(unit, o, n float64) (float64, float64) {
	const dayUs = 86400000000
	day := luaFloorDiv(n+o, dayUs)
	var first, next float64
	switch unit {
	case 1:
		first, next = day, day+1
	case 2:
		first = day - luaMod(day+3, 7)
		next = first + 7
	case 3:
		y, m, d := luaCivilFromDays(day)
		first = day - (d - 1)
		next = first + luaDaysInMonth(y, m)
	default:
		y, _, _ := luaCivilFromDays(day)
		first = luaDaysFromCivil(y, 1, 1)
		next = first + 365 + luaLeap(y)
	}
	return first*dayUs - o, next*dayUs - o
}

func luaCalendarIndex(unit, o, n float64) float64 {
	day := luaFloorDiv(n+o, 86400000000)
	switch unit {
	case 1:
		return day
	case 2:
		return luaFloorDiv(day+3, 7)
	}
	y, m, _ := luaCivilFromDays(day)
	if unit == 3 {
		return y*12 + m - 1
	}
	return y
}

func luaCalendarStart(unit, o, i float64) float64 {
	var first float64
	switch unit {
	case 1:
		first = i
	case 2:
		first = i*7 - 3
	case 3:
		first = luaDaysFromCivil(luaFloorDiv(i, 12), luaMod(i, 12)+1, 1)
	default:
		first = luaDaysFromCivil(i, 1, 1)
	}
	return first*86400000000 - o
}

func luaCalendarPosition(unit, o, s, n float64) (float64, float64, float64) {
	cs, ce := luaCalendarPeriod(unit, o, n)
	if cs < 0 {
		cs = 0
	}
	if s < cs {
		return cs, ce, luaCalendarIndex(unit, o, n) - luaCalendarIndex(unit, o, s)
	}
	if s < ce {
		return cs, ce, 0
	}
	ps, pe := luaCalendarPeriod(unit, o, s)
	return ps, pe, 0
}

// calendarCases returns the instants the Lua tests run for c: the edges of every period (every
// 7th for days), random instants, and states {s, j, n}: a stored start s before, in and after the
// period of n, and j in [1, MaxDebt+1], the period after the placed one whose start is asked.
func calendarCases(c Calendar, r *rand.Rand) (nows []int64, states [][3]int64) {
	every := 1
	if c.Unit == CalendarDay {
		every = 7
	}
	nows = calendarEdges(c, every)
	for range 500 {
		nows = append(nows, r.Int64N(maxTimeUs+1))
	}
	for i, n := range nows {
		if i%5 != 0 {
			continue
		}
		start, end := c.periodUs(n)
		for _, s := range []int64{max(start-1, 0), max(start, 0), n, end - 1, end, end + r.Int64N(400*usPerDay)} {
			if s <= maxTimeUs {
				states = append(states, [3]int64{min(s, maxTimeUs), 1 + r.Int64N(MaxDebt+1), n})
			}
		}
	}
	return nows, states
}

// TestCalendarLuaInDoubles shows that testdata/calendar.lua, transcribed in float64, computes
// exactly what Go computes in int64, at every period edge from the epoch to 2^52 µs and at every
// offset of calendarOffsets, for the period and for the placement of stored states.
func TestCalendarLuaInDoubles(t *testing.T) {
	r := rand.New(rand.NewPCG(23, 2))
	for _, u := range CalendarUnits {
		for _, o := range calendarOffsets {
			c := Calendar{Unit: u, Offset: o}
			l := Limit{Kind: FixedWindow, Quota: MaxQuota, Calendar: c}
			ou := float64(o / time.Microsecond)
			nows, states := calendarCases(c, r)
			for _, n := range nows {
				s, e := c.periodUs(n)
				ls, le := luaCalendarPeriod(float64(u), ou, float64(n))
				if ls != float64(s) || le != float64(e) {
					t.Fatalf("%v at %d µs: Lua in doubles [%.0f, %.0f), Go [%d, %d)", c, n, ls, le, s, e)
				}
			}
			for _, st := range states {
				s, e, m := l.placeFixed(st[0], st[2])
				a := l.windowAfter(s, st[1])
				ls, le, lm := luaCalendarPosition(float64(u), ou, float64(st[0]), float64(st[2]))
				la := luaCalendarStart(float64(u), ou, luaCalendarIndex(float64(u), ou, ls)+float64(st[1]))
				if ls != float64(s) || le != float64(e) || lm != float64(m) || la != float64(a) {
					t.Fatalf("%v: start %d at %d µs, period %d after: Lua in doubles (%.0f, %.0f, %.0f, %.0f), Go (%d, %d, %d, %d)",
						c, st[0], st[2], st[1], ls, le, lm, la, s, e, m, a)
				}
			}
		}
	}
}
