package algorithms

import (
	"fmt"
	"time"
)

// CalendarUnit is the period of a calendar window: a civil day, ISO week, month or year. The zero
// CalendarUnit means none: the limit's window is its Window, a length aligned to the unix epoch.
type CalendarUnit uint8

// The four calendar units. Their numeric values are the unit argument of the Lua functions
// (algorithms/testdata/calendar.lua) and must not change.
const (
	// CalendarDay runs from 00:00 to the next 00:00 (always 24 hours: a fixed offset has no DST).
	CalendarDay CalendarUnit = iota + 1
	// CalendarWeek is the ISO 8601 week, from Monday 00:00 to the next Monday 00:00.
	CalendarWeek
	// CalendarMonth runs from the 1st at 00:00 to the 1st of the next month (28 to 31 days).
	CalendarMonth
	// CalendarYear runs from 1 January at 00:00 to the next 1 January (365 or 366 days).
	CalendarYear
)

var calendarNames = [...]string{CalendarDay: "day", CalendarWeek: "week", CalendarMonth: "month", CalendarYear: "year"}

// CalendarUnits lists every valid CalendarUnit in numeric order.
var CalendarUnits = [...]CalendarUnit{CalendarDay, CalendarWeek, CalendarMonth, CalendarYear}

func (u CalendarUnit) valid() bool { return u >= CalendarDay && u <= CalendarYear }

// String returns the name that ParseCalendarUnit accepts ("day", "week", "month", "year"),
// "none" for the zero unit, or "calendar(N)" for an invalid one.
func (u CalendarUnit) String() string {
	switch {
	case u.valid():
		return calendarNames[u]
	case u == 0:
		return "none"
	}
	return fmt.Sprintf("calendar(%d)", uint8(u))
}

// ParseCalendarUnit returns the CalendarUnit named s: "day", "week", "month" or "year".
func ParseCalendarUnit(s string) (CalendarUnit, error) {
	for _, u := range CalendarUnits {
		if calendarNames[u] == s {
			return u, nil
		}
	}
	return 0, fmt.Errorf("algorithms: unknown calendar unit %q (want day, week, month or year)", s)
}

// MaxLength returns the longest period of unit u: 24 hours, 7 days, 31 days or 366 days (0 for
// the zero or an invalid unit).
func (u CalendarUnit) MaxLength() time.Duration {
	days := [...]time.Duration{CalendarDay: 1, CalendarWeek: 7, CalendarMonth: 31, CalendarYear: 366}
	if !u.valid() {
		return 0
	}
	return days[u] * 24 * time.Hour
}

// MaxCalendarOffset bounds Calendar.Offset on either side of UTC, as RFC 3339 offsets are bounded
// in practice (Go's time and Java's ZoneOffset stop at ±18:00; real zones span −12:00 to +14:00).
const MaxCalendarOffset = 18 * time.Hour

// Calendar aligns a fixed window to the civil calendar of a fixed UTC offset: the window is the
// Unit (a day, ISO week, month or year) that contains now, in the civil time UTC+Offset. Offset is
// east of UTC (+05:30 is 5h30m, −08:00 is −8h), a whole number of minutes, at most
// MaxCalendarOffset either way. A fixed offset has no daylight saving time: every day is 24 hours.
// The zero Calendar means none.
type Calendar struct {
	Unit   CalendarUnit
	Offset time.Duration
}

// String returns the unit's name, followed by " UTC±hh:mm" when Offset is not 0.
func (c Calendar) String() string {
	if c.Offset == 0 {
		return c.Unit.String()
	}
	return c.Unit.String() + " UTC" + FormatCalendarOffset(c.Offset)
}

// check validates c as Limit.Validate does, for the zero Calendar too (which takes no Offset).
func (c Calendar) check() error {
	if c.Unit == 0 {
		if c.Offset != 0 {
			return fmt.Errorf("algorithms: calendar offset %s without a calendar unit", FormatCalendarOffset(c.Offset))
		}
		return nil
	}
	if !c.Unit.valid() {
		return fmt.Errorf("algorithms: unknown calendar unit %d", uint8(c.Unit))
	}
	if c.Offset < -MaxCalendarOffset || c.Offset > MaxCalendarOffset {
		return fmt.Errorf("algorithms: calendar offset must be between -18:00 and +18:00, got %v", c.Offset)
	}
	if c.Offset%time.Minute != 0 {
		return fmt.Errorf("algorithms: calendar offset must be a whole number of minutes, got %v", c.Offset)
	}
	return nil
}

// Period returns the period of c that contains now (unix nanoseconds), [start, end) in unix
// nanoseconds: end − start is the period's real length (a 28- to 31-day month, a 365- or
// 366-day year). now is truncated to microseconds and clamped to [0, 2^52 µs] as Decide does, so
// start is negative for the period that contains the unix epoch when it began before it. Period
// returns (0, 0) for the zero or an invalid Calendar. It allocates nothing.
func (c Calendar) Period(now int64) (start, end int64) {
	if c.Unit == 0 || c.check() != nil {
		return 0, 0
	}
	s, e := c.periodUs(quantize(now))
	return usToDuration(s), usToDuration(e)
}

// usPerDay is one civil day in microseconds (8.64e10 < 2^37).
const usPerDay = 86_400_000_000

// periodUs returns the period of c that contains n µs (0 <= n <= 2^52), [start, end) in µs.
// It is the transcription that algorithms/testdata/calendar.lua follows operation for operation.
// With o the offset in µs, the local civil day is day = floor((n + o) / 1 day) (>= −1), the
// period's first and next-first days follow from it, and start = first×1 day − o.
func (c Calendar) periodUs(n int64) (start, end int64) {
	o := int64(c.Offset / time.Microsecond)
	day := floorDiv(n+o, usPerDay)
	var first, next int64
	switch c.Unit {
	case CalendarDay:
		first, next = day, day+1
	case CalendarWeek:
		first = day - (day+3)%7 // 1970-01-01 was a Thursday: day+3 >= 2 counts days since Monday
		next = first + 7
	case CalendarMonth:
		y, m, d := civilFromDays(day)
		first = day - (d - 1)
		next = first + daysInMonth(y, m)
	default: // CalendarYear
		y, _, _ := civilFromDays(day)
		first = daysFromCivil(y, 1, 1)
		next = first + 365 + leap(y)
	}
	return first*usPerDay - o, next*usPerDay - o
}

// indexUs returns the number of the period of c that contains n µs (0 <= n <= 2^52 + MaxDebt+1
// periods), consecutive periods having consecutive numbers: the local civil day, the week counted
// from Monday 1969-12-29, year×12 + month − 1, the year.
func (c Calendar) indexUs(n int64) int64 {
	day := floorDiv(n+int64(c.Offset/time.Microsecond), usPerDay)
	switch c.Unit {
	case CalendarDay:
		return day
	case CalendarWeek:
		return (day + 3) / 7 // day >= −1
	case CalendarMonth:
		y, m, _ := civilFromDays(day)
		return y*12 + m - 1
	}
	y, _, _ := civilFromDays(day)
	return y
}

// startUs returns the start in µs of the period numbered i (indexUs), a period that starts at or
// after the unix epoch's.
func (c Calendar) startUs(i int64) int64 {
	var first int64
	switch c.Unit {
	case CalendarDay:
		first = i
	case CalendarWeek:
		first = i*7 - 3
	case CalendarMonth:
		first = daysFromCivil(i/12, i%12+1, 1)
	default:
		first = daysFromCivil(i, 1, 1)
	}
	return first*usPerDay - int64(c.Offset/time.Microsecond)
}

// floorDiv returns floor(a / b) for b > 0.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b < 0 {
		q--
	}
	return q
}

// The civil-date algorithms of Howard Hinnant ("chrono-Compatible Low-Level Date Algorithms"),
// for the proleptic Gregorian calendar, on days since 1970-01-01. Eras are 400-year cycles of
// 146097 days starting on 0000-03-01; years are counted from March so that the leap day ends one.
// Every division below has a non-negative dividend for the years 1 to 9999 (the package needs
// 1969 to 2112), so floor division and truncation agree, in Go and in Lua.

// daysFromCivil returns the days since 1970-01-01 of y-m-d (1 <= m <= 12, 1 <= d <= 31).
func daysFromCivil(y, m, d int64) int64 {
	if m <= 2 {
		y--
	}
	era := y / 400
	yoe := y - era*400 // [0, 399]
	mp := (m + 9) % 12 // March = 0
	doy := (153*mp+2)/5 + d - 1
	doe := yoe*365 + yoe/4 - yoe/100 + doy // [0, 146096]
	return era*146097 + doe - 719468
}

// civilFromDays returns the civil date y-m-d of z days since 1970-01-01 (z >= −719468).
func civilFromDays(z int64) (y, m, d int64) {
	z += 719468
	era := z / 146097
	doe := z - era*146097                                  // [0, 146096]
	yoe := (doe - doe/1460 + doe/36524 - doe/146096) / 365 // [0, 399]
	doy := doe - (365*yoe + yoe/4 - yoe/100)               // [0, 365]
	mp := (5*doy + 2) / 153                                // [0, 11], March = 0
	d = doy - (153*mp+2)/5 + 1
	m = (mp+2)%12 + 1
	y = yoe + era*400
	if m <= 2 {
		y++
	}
	return y, m, d
}

// leap returns 1 if y is a Gregorian leap year (divisible by 4, and by 400 if by 100), else 0.
func leap(y int64) int64 {
	if y%4 == 0 && (y%100 != 0 || y%400 == 0) {
		return 1
	}
	return 0
}

// daysInMonth returns the length of month m of year y: 31 for months 1, 3, 5, 7, 8, 10, 12
// ((m + m//8) odd), 30 for the others but February, which has 28 + leap(y).
func daysInMonth(y, m int64) int64 {
	if m == 2 {
		return 28 + leap(y)
	}
	return 30 + (m+m/8)%2
}

// FormatCalendarOffset renders an offset as RFC 3339 does: "+05:30", "-08:00", "+00:00".
// Seconds are dropped (a valid offset has none).
func FormatCalendarOffset(o time.Duration) string {
	sign := byte('+')
	if o < 0 {
		sign, o = '-', -o
	}
	h, m := int64(o/time.Hour), int64(o%time.Hour/time.Minute)
	return string([]byte{sign, byte('0' + h/10%10), byte('0' + h%10), ':', byte('0' + m/10), byte('0' + m%10)})
}

// ParseCalendarOffset parses an RFC 3339 time offset, "Z" or "±hh:mm" (two digits each, minutes
// below 60), at most MaxCalendarOffset either way: "+05:30", "-08:00", "+00:00", "Z".
func ParseCalendarOffset(s string) (time.Duration, error) {
	if s == "Z" {
		return 0, nil
	}
	digit := func(c byte) bool { return c >= '0' && c <= '9' }
	if len(s) != 6 || (s[0] != '+' && s[0] != '-') || s[3] != ':' || !digit(s[1]) || !digit(s[2]) || !digit(s[4]) || !digit(s[5]) {
		return 0, fmt.Errorf("algorithms: invalid calendar offset %q (want \"Z\" or ±hh:mm, e.g. \"+05:30\" or \"-08:00\")", s)
	}
	h := time.Duration(s[1]-'0')*10 + time.Duration(s[2]-'0')
	m := time.Duration(s[4]-'0')*10 + time.Duration(s[5]-'0')
	o := h*time.Hour + m*time.Minute
	if m >= 60 || o > MaxCalendarOffset {
		return 0, fmt.Errorf("algorithms: invalid calendar offset %q (minutes below 60, at most 18:00 either way)", s)
	}
	if s[0] == '-' {
		o = -o
	}
	return o, nil
}
