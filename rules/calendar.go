package rules

import (
	"strconv"
	"strings"
	"time"

	"github.com/meshlimit/meshlimit/algorithms"
)

// Calendar windows. A rate whose window is a calendar unit, "10000/month", "500/day", "1000/week"
// (the ISO week, from Monday) or "1000000/year", is a fixed window aligned to that calendar period in
// UTC, renewed at its start: every "month" counts from the 1st at 00:00 to the next 1st, so its
// length is the month's (28 to 31 days). limits[].calendar_offset, an RFC 3339 offset ("+02:00",
// "-08:00", "Z"), moves the calendar to that fixed offset from UTC (no daylight saving time). A
// calendar rate needs the fixed_window algorithm, which it takes when algorithm is unset.

// calendarRate reports whether the rate s names a calendar unit, and if so returns its quota and
// unit; it leaves every other rate (and its errors) to parseRate.
func calendarRate(s string) (quota int64, unit algorithms.CalendarUnit, ok bool) {
	q, w, found := strings.Cut(s, "/")
	if !found {
		return 0, 0, false
	}
	u, cal := calendarUnit(w)
	if !cal {
		return 0, 0, false
	}
	quota, err := strconv.ParseInt(q, 10, 64)
	if err != nil || quota <= 0 || q[0] == '+' {
		return 0, u, true // a calendar rate with a bad quota: calendarLimit reports it
	}
	return quota, u, true
}

// calendarUnit is algorithms.ParseCalendarUnit without its error: a rate's window is most often
// not a calendar unit, and formatting that error on every configure would cost the cold start fmt.
func calendarUnit(w string) (algorithms.CalendarUnit, bool) {
	for _, u := range algorithms.CalendarUnits {
		if u.String() == w {
			return u, true
		}
	}
	return 0, false
}

// calendarLimit compiles a calendar rate (calendarRate ok) and the limit's calendar_offset into s;
// it reports whether the fields it read are valid.
func (v *validator) calendarLimit(lp string, lj *limitJSON, s *LimitSpec, quota int64, unit algorithms.CalendarUnit) bool {
	ok := true
	if quota <= 0 {
		v.failf(lp+".rate", "invalid rate %q: quota must be a positive integer", lj.Rate)
		ok = false
	}
	s.Limit.Quota, s.Limit.Calendar.Unit = quota, unit
	if lj.CalendarOffset != nil {
		o, err := algorithms.ParseCalendarOffset(*lj.CalendarOffset)
		if err != nil || *lj.CalendarOffset == "" {
			v.failf(lp+".calendar_offset", "invalid offset %q: want \"Z\" or ±hh:mm (e.g. \"+02:00\", \"-08:00\"), minutes below 60, at most 18:00 either way (omit it for UTC)", *lj.CalendarOffset)
			ok = false
		}
		s.Limit.Calendar.Offset = o
	}
	switch lj.Algorithm {
	case "", "fixed_window":
		s.Limit.Kind = algorithms.FixedWindow
	default:
		v.failf(lp+".algorithm", "%q cannot count a calendar %s: a calendar rate (%q) needs fixed_window (the default for it)", lj.Algorithm, unit, lj.Rate)
		ok = false
	}
	if lj.Burst.Set {
		v.failf(lp+".burst", "only token_bucket and leaky_bucket take a burst, not a calendar window")
		ok = false
	}
	return ok
}

// checkCalendarOffset refuses a calendar_offset, even an empty one, on a limit whose rate is not a
// calendar one (a rolling rate, or a concurrency limit).
func (v *validator) checkCalendarOffset(lp string, lj *limitJSON) {
	switch {
	case lj.CalendarOffset == nil:
	case lj.Concurrency.Set:
		v.failf(lp+".calendar_offset", "a concurrency limit takes no calendar_offset (only a calendar rate, \"<quota>/day\", \"/week\", \"/month\" or \"/year\", does)")
	default:
		v.failf(lp+".calendar_offset", "only a calendar rate (\"<quota>/day\", \"/week\", \"/month\" or \"/year\") takes an offset, not %q", lj.Rate)
	}
}

// periodSeconds is the w of a limit in whole seconds: the length of the calendar period that
// contains the outcome (Outcome.Period) for a calendar window, else the limit's Window.
func periodSeconds(l *LimitSpec, period time.Duration) int64 {
	if l.Limit.Calendar.Unit != 0 {
		if period <= 0 {
			period = l.Limit.Calendar.Unit.MaxLength() // an outcome built without its period
		}
		return windowSeconds(period)
	}
	return windowSeconds(l.Limit.Window)
}

// formatLimitRate renders a limit's rate as the configuration writes it, with its calendar unit and
// offset for a calendar window ("10000/month UTC+02:00").
func formatLimitRate(l algorithms.Limit) string {
	if l.Calendar.Unit != 0 {
		return strconv.FormatInt(l.Quota, 10) + "/" + l.Calendar.String()
	}
	return formatRate(l.Quota, l.Window)
}

// PeriodAt returns the length of the calendar period that contains now (unix nanoseconds) for a
// calendar window, its Outcome.Period; 0 for any other limit. It allocates nothing.
func (l *LimitSpec) PeriodAt(now int64) time.Duration {
	if l.Limit.Calendar.Unit == 0 { // inlined at the caller: no call for the other limits
		return 0
	}
	return l.calendarPeriodAt(now)
}

// calendarPeriodAt is PeriodAt's calendar part, kept out of line so that PeriodAt inlines.
//
//go:noinline
func (l *LimitSpec) calendarPeriodAt(now int64) time.Duration {
	start, end := l.Limit.Calendar.Period(now) // the limit is valid: no need for WindowAt's check
	return time.Duration(end - start)
}

// LongestWait returns the longest a client of this limit can have to wait at now (unix
// nanoseconds) for a request the limit can ever admit: for a calendar window, the time until the
// period that contains now ends (its MaxLength once now is past the period that contains 2^52 µs,
// where the algorithms' time stops); for another rate limit, Limit.TTL (a bucket's full refill,
// the window, two windows for the sliding window counter). A limit of a rule that settles may be
// in debt by algorithms.MaxDebt capacities (algorithms.Limit.Adjust): a bucket or a fixed window
// then waits up to MaxDebt+1 times its TTL, a calendar window MaxDebt longest periods more. It is
// 0 for a concurrency limit, whose permit comes back when a request ends, not at a time. It bounds
// what the filter takes from the decision service's answers: t, Retry-After and the over-limit
// cache. It allocates nothing.
func (l *LimitSpec) LongestWait(now int64, settles bool) time.Duration {
	debt := time.Duration(0)
	if settles && l.Limit.Kind.Settles() {
		debt = algorithms.MaxDebt * l.Limit.TTL() // a calendar's TTL is its longest period
	}
	switch {
	case l.Concurrency != 0:
		return 0
	case l.Limit.Calendar.Unit == 0:
		return l.Limit.TTL() + debt
	}
	_, end := l.Limit.Calendar.Period(now)
	if end <= now {
		return l.Limit.Calendar.Unit.MaxLength() + debt
	}
	return time.Duration(end-now) + debt
}
