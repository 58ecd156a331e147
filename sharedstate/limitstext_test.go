package sharedstate

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/algorithms"
	"github.com/meshlimit/meshlimit/internal/fnv"
)

// The overflow key hashes the text of its limits; the hand-written writer must give exactly what
// fmt's %v gave, or every overflow state would start fresh on an upgrade.
func TestTheOverflowLimitsAreWrittenAsFmtWritesThem(t *testing.T) {
	cases := [][]algorithms.Limit{
		{{Kind: algorithms.TokenBucket, Quota: 10, Window: time.Second, Burst: 5}},
		{{Kind: algorithms.FixedWindow, Quota: 1, Window: 90 * time.Minute}, {Kind: algorithms.SlidingLog, Quota: 3, Window: 1500 * time.Microsecond}},
		{{Kind: algorithms.SlidingWindow, Quota: algorithms.MaxQuota, Window: algorithms.MaxWindow}},
		{{Kind: algorithms.LeakyBucket, Quota: 7, Window: time.Minute, Burst: 0}},
		{{Kind: algorithms.FixedWindow, Quota: 100, Calendar: algorithms.Calendar{Unit: algorithms.CalendarMonth}}},
		{{Kind: algorithms.FixedWindow, Quota: 100, Calendar: algorithms.Calendar{Unit: algorithms.CalendarDay, Offset: -5*time.Hour - 30*time.Minute}}},
		{{Kind: algorithms.FixedWindow, Quota: 2, Calendar: algorithms.Calendar{Unit: algorithms.CalendarWeek, Offset: 14 * time.Hour}}},
		{},
	}
	for _, limits := range cases {
		assert.Equal(t, fmt.Sprintf("%v", limits), string(appendLimitsText(nil, limits)))
	}
}

func TestTheOverflowKeyHashesTheFmtTextOfTheOverflowLimits(t *testing.T) {
	limits := []algorithms.Limit{{Kind: algorithms.TokenBucket, Quota: 10, Window: time.Second, Burst: 5}}
	over := []algorithms.Limit{{Kind: algorithms.FixedWindow, Quota: 50, Calendar: algorithms.Calendar{Unit: algorithms.CalendarDay, Offset: time.Hour}}}
	for _, o := range [][]algorithms.Limit{nil, over} {
		tb, err := NewTable("p/", 64, limits, o)
		require.NoError(t, err)
		text := fmt.Sprintf("%v", limits)
		if o != nil {
			text = fmt.Sprintf("%v", o)
		}
		records, err := NewRecords("p/", 64)
		require.NoError(t, err)
		assert.Equal(t, records.OverflowKey()+"/"+strconv.FormatUint(fnv.String(text), 36), tb.overflowKey)
	}
}
