package algorithms

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// Periods are numbered consecutively, and a number's start is its period's: what a window in debt
// counts the periods it pays with.
func TestCalendarPeriodsAreNumberedConsecutively(t *testing.T) {
	for _, u := range CalendarUnits {
		c := Calendar{Unit: u, Offset: -90 * time.Minute}
		for _, at := range []string{"1970-01-01T00:00:00Z", "2024-02-29T23:59:59Z", "2026-12-31T23:00:00Z", "2111-06-01T00:00:00Z"} {
			n := rfc(t, at)
			s, e := c.periodUs(n)
			i := c.indexUs(n)
			assert.Equal(t, s, c.startUs(i), "%v %s", u, at)
			assert.Equal(t, e, c.startUs(i+1), "%v %s", u, at)
			assert.Equal(t, i+1, c.indexUs(e), "%v %s", u, at)
		}
	}
}
