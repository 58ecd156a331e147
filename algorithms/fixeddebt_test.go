package algorithms

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestAFixedWindowCarriesAnOverRunIntoTheNextWindows: issue 20, finding 3 on a fixed window. A
// 100/m window reserves 10; the answer says usage u. What was counted past the quota is carried
// into the next windows, a quota paid per window, up to MaxDebt quotas of debt: a request of cost 1
// waits for the window in which the carried count leaves room for it. Before, the window's end
// forgot the over-run: every key was admitted again at the next window (0.5 s here).
func TestAFixedWindowCarriesAnOverRunIntoTheNextWindows(t *testing.T) {
	l := Limit{Kind: FixedWindow, Quota: 100, Window: time.Minute}
	w0 := int64(1_700_000_040_000_000_000) // a window start
	now := w0 + int64(59500*time.Millisecond)
	for _, tt := range []struct {
		used      int64
		windows   int64 // windows after the current one until cost 1 is admitted
		remaining int64 // what the first window that admits again has left
	}{
		{100, 1, 100},
		{150, 1, 50},
		{250, 2, 50},
		{1000, 10, 100},
		{6500, MaxDebt + 1, 100},      // MaxDebt quotas owed
		{1_000_000, MaxDebt + 1, 100}, // a debt of MaxDebt quotas at most
		{MaxQuota * 100, MaxDebt + 1, 100},
	} {
		state, _, err := l.Decide(nil, now, 10, nil)
		require.NoError(t, err)
		state, err = l.Adjust(state, now, now, tt.used-10, nil)
		require.NoError(t, err)
		_, d, err := l.Decide(state, now, 1, nil)
		require.NoError(t, err)
		admitted := w0 + tt.windows*int64(time.Minute)
		assert.Equal(t, time.Duration(admitted-now), d.RetryAfter, "used %d", tt.used)
		if tt.windows > 1 {
			_, d, err = l.Decide(state, admitted-1000, 1, nil)
			require.NoError(t, err)
			assert.False(t, d.Allowed, "used %d: still in debt the window before", tt.used)
		}
		p, err := l.Peek(state, admitted)
		require.NoError(t, err)
		assert.Equal(t, tt.remaining, p.Remaining, "used %d", tt.used)
	}
}

// A window in debt says when it is really admitted again: RetryAfter for the cost asked, Reset when
// the quota is whole, the effective window when one unit is back; IdleAt holds from then on, and
// Undo of a reservation of the current window gives it back without touching the debt carried in.
func TestAFixedWindowInDebtReportsWhenItIsAdmittedAgain(t *testing.T) {
	l := Limit{Kind: FixedWindow, Quota: 100, Window: time.Minute}
	w0 := int64(1_700_000_040_000_000_000)
	state, _, err := l.Decide(nil, w0, 100, nil)
	require.NoError(t, err)
	state, err = l.Adjust(state, w0, w0, 320, nil) // count 420: 320 carried past this window
	require.NoError(t, err)

	later := w0 + 2*int64(time.Minute) + int64(10*time.Second) // window 2: 220 − 100 = 120 carried
	_, d, err := l.Decide(state, later, 1, nil)
	require.NoError(t, err)
	assert.False(t, d.Allowed)
	assert.Equal(t, int64(0), d.Remaining)
	assert.Equal(t, 110*time.Second, d.RetryAfter, "window 4 starts with 20 counted")
	assert.Equal(t, 170*time.Second, d.Reset, "window 5 starts empty")
	assert.Equal(t, 110*time.Second, d.EffectiveWindow)
	_, d, err = l.Decide(state, later, 90, nil)
	require.NoError(t, err)
	assert.Equal(t, 170*time.Second, d.RetryAfter, "90 more fit once the debt is paid")
	assert.False(t, l.IdleAt(state, w0+5*int64(time.Minute)-1000))
	assert.True(t, l.IdleAt(state, w0+5*int64(time.Minute)))

	w4 := w0 + 4*int64(time.Minute)
	next, d, err := l.Decide(state, w4, 30, nil)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	assert.Equal(t, int64(50), d.Remaining, "20 carried and 30 taken")
	next, err = l.Undo(next, w4+1000, w4, 30, nil)
	require.NoError(t, err)
	p, err := l.Peek(next, w4+1000)
	require.NoError(t, err)
	assert.Equal(t, int64(80), p.Remaining, "the undo gives back 30, the carried 20 stay")
}

// A calendar window pays its debt a period at a time, whatever the periods' lengths.
func TestACalendarWindowCarriesAnOverRunIntoTheNextPeriods(t *testing.T) {
	l := Limit{Kind: FixedWindow, Quota: 10, Calendar: Calendar{Unit: CalendarMonth, Offset: 2 * time.Hour}}
	jan := rfc(t, "2026-01-20T00:00:00Z") * nsPerUs
	state, _, err := l.Decide(nil, jan, 10, nil)
	require.NoError(t, err)
	state, err = l.Adjust(state, jan, jan, 15, nil) // count 25: 15 carried
	require.NoError(t, err)
	mar := rfc(t, "2026-03-10T00:00:00Z") * nsPerUs // February paid 10, March starts with 5
	_, d, err := l.Decide(state, mar, 6, nil)
	require.NoError(t, err)
	assert.False(t, d.Allowed)
	assert.Equal(t, int64(5), d.Remaining)
	apr := rfc(t, "2026-03-31T22:00:00Z") * nsPerUs // 1 April at +02:00
	assert.Equal(t, time.Duration(apr-mar), d.RetryAfter)
	assert.Equal(t, time.Duration(apr-mar), d.Reset)
	_, d, err = l.Decide(state, mar, 5, nil)
	require.NoError(t, err)
	assert.True(t, d.Allowed)
}
