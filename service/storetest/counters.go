package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/algorithms"
	"github.com/meshlimit/meshlimit/service"
)

// testCounters checks CountWindow: counts without a quota in windows aligned to the epoch.
func testCounters(t *testing.T, s service.Store) {
	ctx := context.Background()
	t0 := time.Unix(1_700_000_080, 500_000_000) // 40.5 s into a minute (1_700_000_040 is a multiple of 60)
	count := func(key string, w time.Duration, hits int64, now time.Time) (int64, time.Duration) {
		t.Helper()
		n, reset, err := s.CountWindow(ctx, service.CountRequest{Key: key, Window: w, Hits: hits, Now: now})
		require.NoError(t, err)
		return n, reset
	}
	t.Run("every call is charged, with no quota to stop it", func(t *testing.T) {
		for want := int64(1); want <= 5; want++ {
			n, reset := count("charged", time.Minute, 1, t0)
			assert.Equal(t, want, n)
			assert.Equal(t, 19500*time.Millisecond, reset, "to the end of the minute")
		}
		n, _ := count("charged", time.Minute, 1000, t0)
		assert.Equal(t, int64(1005), n)
	})
	t.Run("zero hits read the count without charging it", func(t *testing.T) {
		n, reset := count("peeked", time.Minute, 0, t0)
		assert.Zero(t, n)
		assert.Zero(t, reset, "no count, no reset")
		count("peeked", time.Minute, 3, t0)
		for range 2 {
			n, reset = count("peeked", time.Minute, 0, t0)
			assert.Equal(t, int64(3), n)
			assert.Equal(t, 19500*time.Millisecond, reset)
		}
	})
	t.Run("windows are aligned to the epoch", func(t *testing.T) {
		count("aligned", time.Minute, 2, t0)
		end := time.Unix(1_700_000_100, 0) // the next minute
		n, _ := count("aligned", time.Minute, 0, end.Add(-time.Microsecond))
		assert.Equal(t, int64(2), n, "the last microsecond of the window")
		n, reset := count("aligned", time.Minute, 1, end)
		assert.Equal(t, int64(1), n, "a new window starts at the minute")
		assert.Equal(t, time.Minute, reset)
	})
	t.Run("keys count apart", func(t *testing.T) {
		for i := range 30 {
			key := "rls:tenant-" + string(rune('a'+i%26)) + string(rune('0'+i/26))
			for want := int64(1); want <= 3; want++ {
				n, _ := count(key, time.Second, 1, t0)
				require.Equal(t, want, n, key)
			}
			n, _ := count(key, time.Second, 0, t0)
			require.Equal(t, int64(3), n, key)
		}
	})
	t.Run("a count that would pass MaxQuota is not charged", func(t *testing.T) {
		t1 := time.Unix(1_700_000_000, 0)
		n, _ := count("full", time.Hour, algorithms.MaxQuota-5, t1)
		require.Equal(t, algorithms.MaxQuota-5, n)
		n, reset := count("full", time.Hour, 10, t1)
		assert.Equal(t, algorithms.MaxQuota-5, n, "the charge of 10 does not fit: not counted")
		assert.Equal(t, time.Hour-time.Duration(t1.Unix()%3600)*time.Second, reset)
		n, _ = count("full", time.Hour, 5, t1)
		assert.Equal(t, algorithms.MaxQuota, n, "a charge that fits exactly is counted")
		n, _ = count("full", time.Hour, 0, t1)
		assert.Equal(t, algorithms.MaxQuota, n)
	})
	t.Run("negative hits, an empty key and an invalid window are refused", func(t *testing.T) {
		for _, r := range []service.CountRequest{
			{Key: "neg", Window: time.Minute, Hits: -1, Now: t0},
			{Window: time.Minute, Hits: 1, Now: t0},
			{Key: "no window", Hits: 1, Now: t0},
		} {
			_, _, err := s.CountWindow(ctx, r)
			assert.Error(t, err, "%+v", r)
		}
	})
}
