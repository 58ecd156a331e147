package sharedstate

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCheckDecidesAsTakeWouldButNeverConsumes(t *testing.T) {
	s := newMemStore()
	l := newLimiter(t, s)
	tab := newTable(t, 16, tokenBucket(3, time.Minute))
	key := []byte("client-a")
	before := s.Len()

	for i := 0; i < 5; i++ {
		out, err := l.Check(tab, key, t0, 1)
		require.NoError(t, err)
		assert.True(t, out.Allowed, "a fresh key checks as allowed however often it is checked")
		assert.Equal(t, Claimed, out.Placement)
	}
	assert.Equal(t, before, s.Len(), "checks wrote nothing")

	for i := 0; i < 3; i++ {
		out, err := l.Take(tab, key, t0, 1)
		require.NoError(t, err)
		require.True(t, out.Allowed)
	}
	out, err := l.Check(tab, key, t0, 1)
	require.NoError(t, err)
	assert.False(t, out.Allowed, "an exhausted key checks as denied")
	assert.Equal(t, Owned, out.Placement)
	assert.Positive(t, out.Decisions[0].RetryAfter)

	out, err = l.Check(tab, []byte("client-b"), t0, 1)
	require.NoError(t, err)
	assert.True(t, out.Allowed, "another key is not affected")

	out, err = l.Check(tab, key, t0+int64(20*time.Second), 1)
	require.NoError(t, err)
	assert.True(t, out.Allowed, "the key refills as the bucket does")
}
