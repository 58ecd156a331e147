package sharedstate

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestTakeLocalDecidesAsTakeWouldAndWritesNothingToTheStore(t *testing.T) {
	s := newMemStore()
	l := newLimiter(t, s)
	tab := newTable(t, 1, tokenBucket(2, time.Second), tokenBucket(3, time.Minute))
	var rec []byte
	want := []bool{true, true, false}
	for i, w := range want {
		out, err := l.TakeLocal(tab, &rec, t0, 1)
		require.NoError(t, err)
		assert.Equal(t, w, out.Allowed, "request %d", i+1)
		assert.Equal(t, Owned, out.Placement)
	}
	out, err := l.TakeLocal(tab, &rec, t0+int64(time.Second), 1)
	require.NoError(t, err)
	assert.True(t, out.Allowed, "the per-second bucket refilled; the per-minute one kept its 1 (the denial took nothing)")
	out, err = l.TakeLocal(tab, &rec, t0+int64(2*time.Second), 1)
	require.NoError(t, err)
	assert.False(t, out.Allowed, "the per-minute bucket is spent")
	assert.Positive(t, out.Decisions[1].RetryAfter)
	got, err := l.Take(tab, []byte("k"), t0, 1)
	require.NoError(t, err)
	assert.NotEqual(t, Overflow, got.Placement, "local records take no slot: the table's one slot is still free")
}

func TestTakeLocalAllocatesNothingOnceWarm(t *testing.T) {
	l := newLimiter(t, newMemStore())
	tab := newTable(t, 1, tokenBucket(1000, time.Second))
	rec := make([]byte, 0, 64)
	_, _ = l.TakeLocal(tab, &rec, t0, 1)
	allocs := testing.AllocsPerRun(100, func() { _, _ = l.TakeLocal(tab, &rec, t0, 1) })
	assert.Zero(t, allocs)
}

func BenchmarkTakeLocal(b *testing.B) {
	l := newLimiter(b, newMemStore())
	tab := newTable(b, 1, tokenBucket(1_000_000, time.Second))
	recs := make([][]byte, 1000)
	now := t0
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		now += 1000
		if _, err := l.TakeLocal(tab, &recs[i%len(recs)], now, 1); err != nil {
			b.Fatal(err)
		}
		i++
	}
}
