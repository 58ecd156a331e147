package rlsconfig

import (
	"strings"
	"time"
)

// Unit is the unit of a rate limit: requests_per_unit requests per one Unit.
type Unit uint8

// The units of envoyproxy/ratelimit. Week, month and year are 7, 30 and 365 days, as there.
const (
	Second Unit = iota + 1
	Minute
	Hour
	Day
	Week
	Month
	Year
)

var unitNames = [...]string{Second: "second", Minute: "minute", Hour: "hour", Day: "day", Week: "week", Month: "month", Year: "year"}

var unitDurations = [...]time.Duration{
	Second: time.Second, Minute: time.Minute, Hour: time.Hour, Day: 24 * time.Hour,
	Week: 7 * 24 * time.Hour, Month: 30 * 24 * time.Hour, Year: 365 * 24 * time.Hour,
}

// ParseUnit returns the unit named s, case-insensitively ("second", "MINUTE"); ok is false for
// any other name.
func ParseUnit(s string) (u Unit, ok bool) {
	for i, n := range unitNames {
		if n != "" && strings.EqualFold(s, n) {
			return Unit(i), true
		}
	}
	return 0, false
}

// Valid reports whether u is one of the units.
func (u Unit) Valid() bool { return u >= Second && u <= Year }

// String returns the lower-case name of u ("minute"), or "" for an invalid Unit.
func (u Unit) String() string {
	if !u.Valid() {
		return ""
	}
	return unitNames[u]
}

// Duration returns the length of one u (0 for an invalid Unit).
func (u Unit) Duration() time.Duration {
	if !u.Valid() {
		return 0
	}
	return unitDurations[u]
}
