package sharedstate

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/algorithms"
)

func TestATableAlikeSharesItsPreparedLimitsButKeepsItsOwnState(t *testing.T) {
	s := newMemStore()
	l := newLimiter(t, s)
	gold, err := NewTable("meshlimit/test/override/a", 1, []algorithms.Limit{tokenBucket(1, time.Hour), tokenBucket(5, time.Minute)}, nil)
	require.NoError(t, err)
	twin, err := gold.Alike("meshlimit/test/override/b")
	require.NoError(t, err)
	assert.Same(t, &gold.limits[0], &twin.limits[0], "one prepared list for both")
	fresh, err := NewTable("meshlimit/test/override/b", 1, []algorithms.Limit{tokenBucket(1, time.Hour), tokenBucket(5, time.Minute)}, nil)
	require.NoError(t, err)
	assert.Equal(t, fresh.records, twin.records, "the twin's records are those NewTable makes under its prefix")
	assert.Equal(t, fresh.overflowKey, twin.overflowKey)

	out, err := l.Take(gold, []byte("a"), t0, 1)
	require.NoError(t, err)
	require.True(t, out.Allowed)
	out, err = l.Take(gold, []byte("a"), t0, 1)
	require.NoError(t, err)
	assert.False(t, out.Allowed, "a's quota of 1 is spent")
	out, err = l.Take(twin, []byte("b"), t0, 1)
	require.NoError(t, err)
	assert.True(t, out.Allowed, "b's table is its own: a's take is not in it")
	assert.Equal(t, int64(4), out.Decisions[1].Remaining)
}
