package algorithms

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// oraclePeriod is the slow reference the integer math is checked against: the period of c that
// contains nowUs, found with the time package in a fixed zone.
func oraclePeriod(c Calendar, nowUs int64) (start, end int64) {
	zone := time.FixedZone("", int(c.Offset/time.Second))
	t := time.UnixMicro(nowUs).In(zone)
	y, m, d := t.Date()
	var first, next time.Time
	switch c.Unit {
	case CalendarDay:
		first = time.Date(y, m, d, 0, 0, 0, 0, zone)
		next = first.AddDate(0, 0, 1)
	case CalendarWeek:
		first = time.Date(y, m, d-(int(t.Weekday())+6)%7, 0, 0, 0, 0, zone) // back to Monday
		next = first.AddDate(0, 0, 7)
	case CalendarMonth:
		first = time.Date(y, m, 1, 0, 0, 0, 0, zone)
		next = first.AddDate(0, 1, 0)
	case CalendarYear:
		first = time.Date(y, 1, 1, 0, 0, 0, 0, zone)
		next = first.AddDate(1, 0, 0)
	}
	return first.UnixMicro(), next.UnixMicro()
}

// calendarOffsets are the offsets the exhaustive tests run at: UTC, the half and quarter hours
// of real zones, both extremes of real zones, and both bounds.
var calendarOffsets = []time.Duration{
	0, 5*time.Hour + 30*time.Minute, 5*time.Hour + 45*time.Minute, -(9*time.Hour + 30*time.Minute),
	-8 * time.Hour, 14 * time.Hour, -12 * time.Hour, MaxCalendarOffset, -MaxCalendarOffset,
}

// calendarEdges returns instants (µs) of c in [0, 2^52]: 0, 1, 2^52 − 1, 2^52, and every every-th
// period boundary between them (found by the oracle) with the microseconds on either side.
func calendarEdges(c Calendar, every int) []int64 {
	edges := []int64{0, 1, maxTimeUs - 1, maxTimeUs}
	_, b := oraclePeriod(c, 0)
	for i := 0; b <= maxTimeUs; i++ {
		if i%every == 0 {
			for _, t := range []int64{b - 1, b, b + 1} {
				if t <= maxTimeUs {
					edges = append(edges, t)
				}
			}
		}
		_, b = oraclePeriod(c, b)
	}
	return edges
}

// rfc parses an RFC 3339 time into µs.
func rfc(t *testing.T, s string) int64 {
	t.Helper()
	v, err := time.Parse(time.RFC3339Nano, s)
	require.NoError(t, err)
	return v.UnixMicro()
}

func TestCalendarPeriods(t *testing.T) {
	utc := func(u CalendarUnit) Calendar { return Calendar{Unit: u} }
	at := func(u CalendarUnit, o time.Duration) Calendar { return Calendar{Unit: u, Offset: o} }
	const ist, pst = 5*time.Hour + 30*time.Minute, -8 * time.Hour
	tests := []struct {
		name       string
		cal        Calendar
		now        string
		start, end string
	}{
		{"a day in UTC runs from midnight to midnight", utc(CalendarDay), "2026-05-14T13:07:00Z",
			"2026-05-14T00:00:00Z", "2026-05-15T00:00:00Z"},
		{"the instant of midnight starts the new day", utc(CalendarDay), "2026-05-15T00:00:00Z",
			"2026-05-15T00:00:00Z", "2026-05-16T00:00:00Z"},
		{"a microsecond before midnight is still the old day", utc(CalendarDay), "2026-05-14T23:59:59.999999Z",
			"2026-05-14T00:00:00Z", "2026-05-15T00:00:00Z"},
		{"a day at +05:30 starts at 18:30 UTC the day before", at(CalendarDay, ist), "2026-05-14T20:00:00Z",
			"2026-05-14T18:30:00Z", "2026-05-15T18:30:00Z"},
		{"a day at -08:00 starts at 08:00 UTC", at(CalendarDay, pst), "2026-05-14T07:59:59.999999Z",
			"2026-05-13T08:00:00Z", "2026-05-14T08:00:00Z"},
		{"an ISO week starts on Monday", utc(CalendarWeek), "2026-05-14T12:00:00Z",
			"2026-05-11T00:00:00Z", "2026-05-18T00:00:00Z"},
		{"a Sunday belongs to the week that began the Monday before", utc(CalendarWeek), "2026-05-17T23:59:59Z",
			"2026-05-11T00:00:00Z", "2026-05-18T00:00:00Z"},
		{"the week of 2026-12-31 is ISO week 53 of 2026 and ends in 2027", utc(CalendarWeek), "2026-12-31T12:00:00Z",
			"2026-12-28T00:00:00Z", "2027-01-04T00:00:00Z"},
		{"the week of 2026-01-01 began in 2025", utc(CalendarWeek), "2026-01-01T00:00:00Z",
			"2025-12-29T00:00:00Z", "2026-01-05T00:00:00Z"},
		{"a Monday at -08:00 begins at 08:00 UTC", at(CalendarWeek, pst), "2026-05-11T07:00:00Z",
			"2026-05-04T08:00:00Z", "2026-05-11T08:00:00Z"},
		{"February 2024 has 29 days", utc(CalendarMonth), "2024-02-29T12:00:00Z",
			"2024-02-01T00:00:00Z", "2024-03-01T00:00:00Z"},
		{"the last microsecond of 2024-02-29 is still February", utc(CalendarMonth), "2024-02-29T23:59:59.999999Z",
			"2024-02-01T00:00:00Z", "2024-03-01T00:00:00Z"},
		{"February 2026 has 28 days", utc(CalendarMonth), "2026-02-10T00:00:00Z",
			"2026-02-01T00:00:00Z", "2026-03-01T00:00:00Z"},
		{"February 2100 has 28 days: 2100 is not a leap year", utc(CalendarMonth), "2100-02-28T23:00:00Z",
			"2100-02-01T00:00:00Z", "2100-03-01T00:00:00Z"},
		{"February 2000 has 29 days: 2000 is a leap year", utc(CalendarMonth), "2000-02-29T00:00:00Z",
			"2000-02-01T00:00:00Z", "2000-03-01T00:00:00Z"},
		{"April has 30 days", utc(CalendarMonth), "2026-04-30T23:59:59Z",
			"2026-04-01T00:00:00Z", "2026-05-01T00:00:00Z"},
		{"December ends at the new year", utc(CalendarMonth), "2026-12-31T23:59:59.999999Z",
			"2026-12-01T00:00:00Z", "2027-01-01T00:00:00Z"},
		{"the first instant of a month starts it", utc(CalendarMonth), "2026-03-01T00:00:00Z",
			"2026-03-01T00:00:00Z", "2026-04-01T00:00:00Z"},
		{"at +05:30 March begins on 29 February at 18:30 UTC", at(CalendarMonth, ist), "2024-02-29T20:00:00Z",
			"2024-02-29T18:30:00Z", "2024-03-31T18:30:00Z"},
		{"at -08:00 it is still January at 07:59 UTC on 1 February", at(CalendarMonth, pst), "2026-02-01T07:59:59Z",
			"2026-01-01T08:00:00Z", "2026-02-01T08:00:00Z"},
		{"2024 has 366 days", utc(CalendarYear), "2024-07-01T00:00:00Z",
			"2024-01-01T00:00:00Z", "2025-01-01T00:00:00Z"},
		{"2100 has 365 days", utc(CalendarYear), "2100-12-31T23:59:59Z",
			"2100-01-01T00:00:00Z", "2101-01-01T00:00:00Z"},
		{"at -08:00 the new year begins at 08:00 UTC", at(CalendarYear, pst), "2025-01-01T03:00:00Z",
			"2024-01-01T08:00:00Z", "2025-01-01T08:00:00Z"},
		{"at +18:00 the new year begins at 06:00 UTC on 31 December", at(CalendarYear, MaxCalendarOffset), "2025-12-31T06:00:00Z",
			"2025-12-31T06:00:00Z", "2026-12-31T06:00:00Z"},
		{"at -18:00 the day begins at 18:00 UTC", at(CalendarDay, -MaxCalendarOffset), "2026-05-14T17:59:59Z",
			"2026-05-13T18:00:00Z", "2026-05-14T18:00:00Z"},
		{"the day that contains the unix epoch at +05:30 began before it", at(CalendarDay, ist), "1970-01-01T00:00:00Z",
			"1969-12-31T18:30:00Z", "1970-01-01T18:30:00Z"},
		{"the week that contains the unix epoch began on Monday 1969-12-29", utc(CalendarWeek), "1970-01-01T00:00:00Z",
			"1969-12-29T00:00:00Z", "1970-01-05T00:00:00Z"},
		{"the latest representable instant is in the leap year 2112", utc(CalendarYear), "2112-09-17T23:53:47.370496Z",
			"2112-01-01T00:00:00Z", "2113-01-01T00:00:00Z"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.NoError(t, tc.cal.check())
			now := rfc(t, tc.now)
			start, end := tc.cal.Period(now * nsPerUs)
			assert.Equal(t, rfc(t, tc.start)*nsPerUs, start, "start %v", time.Unix(0, start).UTC())
			assert.Equal(t, rfc(t, tc.end)*nsPerUs, end, "end %v", time.Unix(0, end).UTC())
			l := Limit{Kind: FixedWindow, Quota: 1, Calendar: tc.cal}
			assert.Equal(t, time.Duration(end-start), l.WindowAt(now*nsPerUs), "WindowAt is the period's length")
		})
	}
	assert.Equal(t, int64(maxTimeUs), rfc(t, "2112-09-17T23:53:47.370496Z"), "the last case is at 2^52 µs")
	y, w := time.Date(2026, 12, 28, 0, 0, 0, 0, time.UTC).ISOWeek()
	assert.Equal(t, [2]int{2026, 53}, [2]int{y, w}, "2026-12-28 is in ISO week 53 of 2026")
	y, w = time.Date(2025, 12, 29, 0, 0, 0, 0, time.UTC).ISOWeek()
	assert.Equal(t, [2]int{2026, 1}, [2]int{y, w}, "2025-12-29 is in ISO week 1 of 2026")
}

// TestCalendarPeriodMatchesTheTimePackage checks the integer math against the oracle at every
// month, year and week boundary from the epoch to 2^52 µs (every 7th day boundary), at each of
// calendarOffsets, the microseconds on either side, and random instants.
func TestCalendarPeriodMatchesTheTimePackage(t *testing.T) {
	r := rand.New(rand.NewPCG(23, 1))
	for _, u := range CalendarUnits {
		for _, o := range calendarOffsets {
			c := Calendar{Unit: u, Offset: o}
			every := 1
			if u == CalendarDay {
				every = 7
			}
			instants := calendarEdges(c, every)
			for range 2000 {
				instants = append(instants, r.Int64N(maxTimeUs+1))
			}
			for _, n := range instants {
				ws, we := oraclePeriod(c, n)
				s, e := c.periodUs(n)
				if s != ws || e != we {
					t.Fatalf("%v at %d µs (%v): period [%d, %d), the time package says [%d, %d)",
						c, n, time.UnixMicro(n).UTC(), s, e, ws, we)
				}
			}
		}
	}
}

// FuzzCalendarPeriod checks the integer math against the oracle at any instant, unit and offset.
func FuzzCalendarPeriod(f *testing.F) {
	f.Add(uint8(2), int16(330), int64(1_798_761_600_000_000)) // 2027-01-01 00:00 UTC
	f.Add(uint8(1), int16(-480), int64(0))
	f.Add(uint8(3), int16(1080), int64(maxTimeUs))
	f.Add(uint8(0), int16(-1080), int64(951_782_400_000_000)) // 2000-02-29 00:00 UTC
	f.Fuzz(func(t *testing.T, unit uint8, offsetMin int16, nowUs int64) {
		c := Calendar{Unit: CalendarUnit(unit%4 + 1), Offset: time.Duration(int64(offsetMin)%(18*60+1)) * time.Minute}
		n := quantize(nowUs * nsPerUs)
		if nowUs > maxTimeUs || nowUs < 0 {
			n = quantize(nowUs) // also reach the clamps without overflowing
		}
		ws, we := oraclePeriod(c, n)
		s, e := c.Period(n * nsPerUs)
		if s != ws*nsPerUs || e != we*nsPerUs {
			t.Fatalf("%v at %d µs: period [%d, %d) ns, the time package says [%d, %d) µs", c, n, s, e, ws, we)
		}
		if n < s/nsPerUs || n >= e/nsPerUs {
			t.Fatalf("%v at %d µs: the period [%d, %d) ns does not contain it", c, n, s, e)
		}
	})
}

// TestCivilDatesRoundTripEveryDay checks civilFromDays and daysFromCivil against the time package
// and against each other for every day from 1969 to 2113, and daysInMonth for every month.
func TestCivilDatesRoundTripEveryDay(t *testing.T) {
	for z := int64(-366); z <= maxTimeUs/usPerDay+400; z++ {
		y, m, d := civilFromDays(z)
		ty, tm, td := time.UnixMicro(z * usPerDay).UTC().Date()
		if y != int64(ty) || m != int64(tm) || d != int64(td) {
			t.Fatalf("civilFromDays(%d) = %d-%d-%d, want %d-%d-%d", z, y, m, d, ty, tm, td)
		}
		if back := daysFromCivil(y, m, d); back != z {
			t.Fatalf("daysFromCivil(%d-%d-%d) = %d, want %d", y, m, d, back, z)
		}
		if d == 1 {
			want := time.Date(int(y), time.Month(m)+1, 0, 0, 0, 0, 0, time.UTC).Day()
			require.Equal(t, int64(want), daysInMonth(y, m), "days in %d-%02d", y, m)
		}
	}
}

func TestCalendarNamesRoundTrip(t *testing.T) {
	for _, u := range CalendarUnits {
		got, err := ParseCalendarUnit(u.String())
		require.NoError(t, err)
		assert.Equal(t, u, got)
	}
	_, err := ParseCalendarUnit("fortnight")
	assert.EqualError(t, err, `algorithms: unknown calendar unit "fortnight" (want day, week, month or year)`)
	assert.Equal(t, "none", CalendarUnit(0).String())
	assert.Equal(t, "calendar(9)", CalendarUnit(9).String())
	assert.Equal(t, "month UTC+05:30", Calendar{Unit: CalendarMonth, Offset: 5*time.Hour + 30*time.Minute}.String())
	assert.Equal(t, "week", Calendar{Unit: CalendarWeek}.String())
	assert.Equal(t, []time.Duration{24 * time.Hour, 7 * 24 * time.Hour, 31 * 24 * time.Hour, 366 * 24 * time.Hour},
		[]time.Duration{CalendarDay.MaxLength(), CalendarWeek.MaxLength(), CalendarMonth.MaxLength(), CalendarYear.MaxLength()})
}

func TestParseCalendarOffset(t *testing.T) {
	tests := []struct {
		name, in string
		want     time.Duration
		wantErr  string
	}{
		{"accepts a half-hour offset east of UTC", "+05:30", 5*time.Hour + 30*time.Minute, ""},
		{"accepts an offset west of UTC", "-08:00", -8 * time.Hour, ""},
		{"accepts Z for UTC", "Z", 0, ""},
		{"accepts +18:00, the bound", "+18:00", MaxCalendarOffset, ""},
		{"accepts -18:00, the bound", "-18:00", -MaxCalendarOffset, ""},
		{"rejects an offset beyond 18 hours", "+18:01", 0, `algorithms: invalid calendar offset "+18:01" (minutes below 60, at most 18:00 either way)`},
		{"rejects 60 minutes", "+01:60", 0, `algorithms: invalid calendar offset "+01:60" (minutes below 60, at most 18:00 either way)`},
		{"rejects an offset without a sign", "05:30", 0, `algorithms: invalid calendar offset "05:30" (want "Z" or ±hh:mm, e.g. "+05:30" or "-08:00")`},
		{"rejects an offset without a colon", "+0530", 0, `algorithms: invalid calendar offset "+0530" (want "Z" or ±hh:mm, e.g. "+05:30" or "-08:00")`},
		{"rejects seconds", "+05:30:00", 0, `algorithms: invalid calendar offset "+05:30:00" (want "Z" or ±hh:mm, e.g. "+05:30" or "-08:00")`},
		{"rejects a zone name", "UTC", 0, `algorithms: invalid calendar offset "UTC" (want "Z" or ±hh:mm, e.g. "+05:30" or "-08:00")`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseCalendarOffset(tc.in)
			if tc.wantErr != "" {
				require.EqualError(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

// FuzzParseCalendarOffset: the parser never panics, and what it accepts is a valid offset that
// FormatCalendarOffset renders back to the same text (or "+00:00" for "Z").
func FuzzParseCalendarOffset(f *testing.F) {
	for _, s := range []string{"+05:30", "-08:00", "Z", "+18:00", "-18:01", "+1:00", "+٠٥:٣٠", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		o, err := ParseCalendarOffset(s)
		if err != nil {
			return
		}
		if c := (Calendar{Unit: CalendarDay, Offset: o}); c.check() != nil {
			t.Fatalf("ParseCalendarOffset(%q) = %v, which Validate refuses: %v", s, o, c.check())
		}
		want := s
		if s == "Z" || s == "-00:00" {
			want = "+00:00"
		}
		if got := FormatCalendarOffset(o); got != want {
			t.Fatalf("ParseCalendarOffset(%q) = %v, formatted back as %q", s, o, got)
		}
	})
}
