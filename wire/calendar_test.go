package wire

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/algorithms"
)

func TestACalendarWindowCrossesTheWireWithItsUnitAndOffset(t *testing.T) {
	var limits []algorithms.Limit
	var keys []Key
	var costs []int64
	for i, u := range algorithms.CalendarUnits {
		l := algorithms.Limit{Kind: algorithms.FixedWindow, Quota: 10000 + int64(i), Calendar: algorithms.Calendar{Unit: u, Offset: time.Duration(i*330-500) * time.Minute}}
		require.NoError(t, l.Validate())
		limits = append(limits, l)
		keys = append(keys, Key{Plugin: "p", Rule: "r", Fingerprint: uint64(i + 1), Value: u.String()})
		costs = append(costs, 1)
	}
	limits = append(limits, algorithms.Limit{Kind: algorithms.FixedWindow, Quota: 1, Calendar: algorithms.Calendar{Unit: algorithms.CalendarMonth}})
	keys = append(keys, Key{Plugin: "p", Rule: "r", Fingerprint: 9, Value: "utc"})
	costs = append(costs, 2)
	var req Request
	body := encodeRequest(keys, limits, costs)
	require.NoError(t, DecodeRequest(body, DecodeOptions{}, &req), "%s", body)
	for i, d := range req.Descriptors {
		assert.Equal(t, limits[i], d.Limit, "descriptor %d", i)
	}
	assert.NotContains(t, string(body), "window_ms", "a calendar window sends no length")
}

func TestABadCalendarDescriptorIsRefusedAtItsField(t *testing.T) {
	const head = `{"descriptors":[{"key":"k","algorithm":"fixed_window","quota":10,`
	for _, tc := range []struct {
		name, members, err string
	}{
		{"an unknown unit", `"calendar":"fortnight"}]}`, `descriptors[0].calendar: unknown calendar unit "fortnight" (want day, week, month or year)`},
		{"a unit that is not a string", `"calendar":3}]}`, `descriptors[0].calendar: want a string, got a number`},
		{"a calendar with a window", `"calendar":"month","window_ms":1000}]}`, `descriptors[0].window_ms: must be 0 or absent with a calendar (the period is the window), got 1000`},
		{"an offset beyond 18 hours", `"calendar":"day","calendar_offset_min":1081}]}`, `descriptors[0].calendar_offset_min: must be between -1080 and 1080, got 1081`},
		{"an offset without a calendar", `"window_ms":1000,"calendar_offset_min":60}]}`, `descriptors[0].calendar_offset_min: only with a calendar`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var req Request
			err := DecodeRequest([]byte(head+tc.members), DecodeOptions{}, &req)
			require.Error(t, err)
			assert.Equal(t, tc.err, err.Error())
		})
	}
	var req Request
	err := DecodeRequest([]byte(`{"descriptors":[{"key":"k","algorithm":"token_bucket","quota":10,"calendar":"month"}]}`), DecodeOptions{}, &req)
	assert.EqualError(t, err, "descriptors[0].calendar: only fixed_window counts calendar periods, not token_bucket")
}
