package sharedstate

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// convoyStore makes one worker lose every CAS race to another: before each of the victim's writes, the
// other worker runs a whole Take on the same key against the underlying store (an admission, so it
// writes), until it has done so wins times. This is the convoy that a first-in-first-out scheduler
// produces (the e2e host yielding on every shared-data call): the worker that won a round reaches its
// next read and write before the losers reach theirs, so it wins again, and a loser loses one round per
// admission of the winner, however few workers there are.
type convoyStore struct {
	Store
	other *Limiter
	tab   *Table
	key   []byte
	wins  int
	t     *testing.T
}

func (c *convoyStore) Set(key string, value []byte, cas uint32) error {
	if c.wins > 0 {
		c.wins--
		out, err := c.other.Take(c.tab, c.key, t0, 1)
		require.NoError(c.t, err)
		require.True(c.t, out.Allowed, "the other worker's request is an admission: it writes")
	}
	return c.Store.Set(key, value, cas)
}

// convoy returns the victim's Limiter on a store where another worker on the same key wins the next
// wins races. Both use the default bound on attempts, as the filter does.
func convoy(t *testing.T, tab *Table, key []byte, wins int) *Limiter {
	base := newMemStore()
	const sentinel = "meshlimit/test/sentinel"
	other, err := NewUpdater(base, sentinel, 0)
	require.NoError(t, err)
	victim, err := NewUpdater(&convoyStore{Store: base, other: NewLimiter(other), tab: tab, key: key, wins: wins, t: t}, sentinel, 0)
	require.NoError(t, err)
	return NewLimiter(victim)
}

func TestARequestThatLosesARaceToEveryAdmissionOfAnotherWorkerIsStillChargedExactly(t *testing.T) {
	const capacity, othersWins = 200, 150 // far more lost rounds than the 64 the bound once allowed
	tab := newTable(t, 64, tokenBucket(capacity, time.Hour))
	out, err := convoy(t, tab, []byte("hot"), othersWins).Take(tab, []byte("hot"), t0, 1)
	require.NoError(t, err, "lost races are others' progress, not a failure: the request is decided, not left to failure_mode")
	assert.True(t, out.Allowed)
	assert.Equal(t, othersWins+1, out.Attempts, "one lost round per admission of the other worker, then a win")
	assert.Equal(t, int64(capacity-othersWins-1), out.Decisions[0].Remaining, "every admission was charged once")
}

func TestARequestStarvedWhileAnotherWorkerDrainsTheBucketIsDeniedNotWavedThrough(t *testing.T) {
	const capacity = 100 // the e2e test's bucket: 8 VMs, 100/h, a frozen clock
	tab := newTable(t, 64, tokenBucket(capacity, time.Hour))
	out, err := convoy(t, tab, []byte("hot"), capacity).Take(tab, []byte("hot"), t0, 1)
	require.NoError(t, err, "ErrContention here is what the filter's failure_mode (allow) turned into a 101st admission")
	assert.False(t, out.Allowed, "the other worker took the whole capacity")
	assert.Equal(t, capacity+1, out.Attempts)
	assert.Equal(t, int64(0), out.Decisions[0].Remaining)
}
