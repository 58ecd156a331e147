package sharedstate

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// drain takes n units of key in tab and requires that the next one is denied.
func drain(t *testing.T, l *Limiter, tab *Table, key string, n int) {
	t.Helper()
	for i := range n {
		out, err := l.Take(tab, []byte(key), t0, 1)
		require.NoError(t, err)
		require.True(t, out.Allowed, "%s request %d", key, i+1)
	}
	out, err := l.Take(tab, []byte(key), t0, 1)
	require.NoError(t, err)
	require.False(t, out.Allowed, "%s is out of quota", key)
}

func TestAForgottenKeyStartsFromAFreshStateAtOnce(t *testing.T) {
	l := newLimiter(t, newMemStore())
	tab := newTable(t, 16, tokenBucket(3, time.Hour))
	drain(t, l, tab, "alice", 3)

	forgotten, err := l.Forget(tab, []byte("alice"))
	require.NoError(t, err)
	assert.True(t, forgotten)
	out, err := l.Take(tab, []byte("alice"), t0, 1)
	require.NoError(t, err)
	assert.True(t, out.Allowed, "the same instant: nothing refilled, the state is fresh")
	assert.Equal(t, int64(2), out.Decisions[0].Remaining, "a fresh bucket of 3 less this request")
}

func TestForgettingAliceNeverTouchesBobsRecord(t *testing.T) {
	for _, slots := range []int{1, 2, 16} { // 1: every key meets every other in the one slot
		l := newLimiter(t, newMemStore())
		tab := newTable(t, slots, tokenBucket(3, time.Hour))
		drain(t, l, tab, "bob", 3)

		forgotten, err := l.Forget(tab, []byte("alice"))
		require.NoError(t, err)
		assert.False(t, forgotten, "%d slots: alice owns no record", slots)
		out, err := l.Take(tab, []byte("bob"), t0, 1)
		require.NoError(t, err)
		assert.False(t, out.Allowed, "%d slots: bob is still out of quota", slots)
		assert.Equal(t, Owned, out.Placement, "%d slots: bob still owns his record", slots)
	}
}

func TestForgettingAKeyTwiceIsTheSameAsOnce(t *testing.T) {
	s := newMemStore()
	l := newLimiter(t, s)
	tab := newTable(t, 16, tokenBucket(3, time.Hour))
	drain(t, l, tab, "alice", 3)
	first, err := l.Forget(tab, []byte("alice"))
	require.NoError(t, err)
	keys, bytes := s.Len(), s.Bytes()
	second, err := l.Forget(tab, []byte("alice"))
	require.NoError(t, err)
	assert.True(t, first)
	assert.False(t, second, "nothing left to forget")
	assert.Equal(t, keys, s.Len(), "the second call writes nothing")
	assert.Equal(t, bytes, s.Bytes())
}

func TestAKeyThatOwnsALaterCandidateIsStillFoundAfterTheKeyBeforeItIsForgotten(t *testing.T) {
	// Two slots, so that every key's candidates are both: find a bob whose first candidate is
	// alice's slot, so that bob's record is in his second.
	c := newCursor(t, newMemStore())
	r, err := NewRecords("meshlimit/test/r", 2)
	require.NoError(t, err)
	_, err = c.Update(r, []byte("alice"), &expiringEditor{until: 100})
	require.NoError(t, err)
	aliceSlot := r.candidates(c.u, []byte("alice"))
	first, _ := aliceSlot.next()
	bob := ""
	for i := 0; bob == ""; i++ {
		k := "bob" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		cands := r.candidates(c.u, []byte(k))
		if s, _ := cands.next(); s == first {
			bob = k
		}
	}
	_, err = c.Update(r, []byte(bob), &expiringEditor{until: 200})
	require.NoError(t, err)

	forgotten, err := c.Forget(r, []byte("alice"))
	require.NoError(t, err)
	require.True(t, forgotten)
	got, found := until(t, c, r, bob)
	assert.True(t, found, "the forgotten slot does not end the scan of bob's candidates")
	assert.Equal(t, int64(200), got)
	res, err := c.Update(r, []byte(bob), &expiringEditor{until: 300})
	require.NoError(t, err)
	assert.Equal(t, Owned, res.Placement, "bob updates his own record, he does not claim alice's old slot")
	_, found = until(t, c, r, "alice")
	assert.False(t, found)
}

// racingStore runs before once, just before the first Set of a key that starts with prefix.
type racingStore struct {
	*memStore
	prefix string
	before func()
}

func (s *racingStore) Set(key string, value []byte, cas uint32) error {
	if f := s.before; f != nil && len(key) >= len(s.prefix) && key[:len(s.prefix)] == s.prefix {
		s.before = nil
		f()
	}
	return s.memStore.Set(key, value, cas)
}

func TestAForgetThatLosesARaceToAnUpdateOfTheSameKeyReadsAgainAndStillForgets(t *testing.T) {
	s := &racingStore{memStore: newMemStore(), prefix: "meshlimit/test/rule/"}
	l := newLimiter(t, s)
	other := newLimiter(t, s.memStore) // another worker, writing straight to the store
	tab := newTable(t, 16, tokenBucket(3, time.Hour))
	drain(t, l, tab, "alice", 3)
	s.before = func() { _, _ = other.Take(tab, []byte("alice"), t0+int64(time.Hour), 1) }

	forgotten, err := l.Forget(tab, []byte("alice"))
	require.NoError(t, err)
	assert.True(t, forgotten)
	out, err := l.Take(tab, []byte("alice"), t0, 1)
	require.NoError(t, err)
	assert.Equal(t, int64(2), out.Decisions[0].Remaining, "the record the race wrote was forgotten too")
}

func TestAForgetThatLosesTheSlotToAnotherKeyLeavesThatKeysRecord(t *testing.T) {
	s := &racingStore{memStore: newMemStore(), prefix: "meshlimit/test/r/"}
	c := newCursor(t, s)
	other := newCursor(t, s.memStore)
	r, err := NewRecords("meshlimit/test/r", 1)
	require.NoError(t, err)
	_, err = c.Update(r, []byte("alice"), &expiringEditor{until: 100})
	require.NoError(t, err)
	// Between the Forget's read and its write, alice's entry expires and bob takes the slot.
	s.before = func() { _, _ = other.Update(r, []byte("bob"), &expiringEditor{now: 100, until: 500}) }

	forgotten, err := c.Forget(r, []byte("alice"))
	require.NoError(t, err)
	assert.False(t, forgotten, "the slot is bob's by the time of the write")
	got, found := until(t, c, r, "bob")
	assert.True(t, found)
	assert.Equal(t, int64(500), got, "bob's record is untouched")
}

func TestAKeyInTheOverflowStateCannotBeForgottenIndividually(t *testing.T) {
	l := newLimiter(t, newMemStore())
	tab := newTable(t, 1, tokenBucket(3, time.Hour))
	drain(t, l, tab, "alice", 3) // alice holds the one slot
	for range 3 {
		out, err := l.Take(tab, []byte("bob"), t0, 1)
		require.NoError(t, err)
		require.Equal(t, Overflow, out.Placement)
	}

	forgotten, err := l.Forget(tab, []byte("bob"))
	require.NoError(t, err)
	assert.False(t, forgotten, "bob has no record of his own")
	out, err := l.Take(tab, []byte("bob"), t0, 1)
	require.NoError(t, err)
	assert.Equal(t, Overflow, out.Placement)
	assert.False(t, out.Allowed, "the shared overflow state is not forgotten for one key")
}

func TestForgetGivesUpWithErrContentionAfterMaxAttempts(t *testing.T) {
	s := newMemStore()
	l := newLimiter(t, s)
	tab := newTable(t, 16, tokenBucket(3, time.Hour))
	drain(t, l, tab, "alice", 3)
	u, err := NewUpdater(mismatchStore{s}, "meshlimit/test/sentinel", 8)
	require.NoError(t, err)

	_, err = NewLimiter(u).Forget(tab, []byte("alice"))
	assert.ErrorIs(t, err, ErrContention)
}
