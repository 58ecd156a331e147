package sharedstate

import (
	"encoding/binary"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// expiringEditor is an Editor whose payload is an expiry time: a record expired at now is vacant, and
// an update stores until (when it is later than what is stored).
type expiringEditor struct{ now, until int64 }

func (e *expiringEditor) Vacant(p []byte) bool {
	return len(p) != 8 || int64(binary.LittleEndian.Uint64(p)) <= e.now
}

func (e *expiringEditor) Edit(dst, cur []byte) ([]byte, bool, error) {
	if len(cur) == 8 && int64(binary.LittleEndian.Uint64(cur)) >= e.until {
		return dst, false, nil
	}
	return binary.LittleEndian.AppendUint64(dst, uint64(e.until)), true, nil
}

func newCursor(t testing.TB, s Store) *Cursor {
	t.Helper()
	u, err := NewUpdater(s, "meshlimit/test/sentinel", 0)
	require.NoError(t, err)
	return NewCursor(u)
}

func until(t *testing.T, c *Cursor, r *Records, key string) (int64, bool) {
	t.Helper()
	p, ok, err := c.Find(r, []byte(key))
	require.NoError(t, err)
	if !ok {
		return 0, false
	}
	return int64(binary.LittleEndian.Uint64(p)), true
}

func TestAnotherKeyNeverReadsNorReplacesARecordThatIsNotVacant(t *testing.T) {
	c := newCursor(t, newMemStore())
	r, err := NewRecords("meshlimit/test/blocked", 1) // one slot: every key meets every other
	require.NoError(t, err)
	res, err := c.Update(r, []byte("victim"), &expiringEditor{now: 0, until: 100})
	require.NoError(t, err)
	assert.Equal(t, Claimed, res.Placement)

	res, err = c.Update(r, []byte("attacker"), &expiringEditor{now: 50, until: 1000})
	require.NoError(t, err)
	assert.Equal(t, NoRoom, res.Placement, "the victim's entry is live at 50")
	assert.False(t, res.Written)
	_, found := until(t, c, r, "attacker")
	assert.False(t, found, "the attacker does not read the victim's entry as its own")
	got, found := until(t, c, r, "victim")
	assert.True(t, found)
	assert.Equal(t, int64(100), got, "the victim's entry is untouched")

	res, err = c.Update(r, []byte("attacker"), &expiringEditor{now: 100, until: 1000})
	require.NoError(t, err)
	assert.Equal(t, Evicted, res.Placement, "an expired entry is vacant and may be taken over")
	_, found = until(t, c, r, "victim")
	assert.False(t, found)
}

func TestAKeyUsesTheCandidateItOwnsBeforeClaimingAnother(t *testing.T) {
	s := newMemStore()
	c := newCursor(t, s)
	r, err := NewRecords("meshlimit/test/r", 64)
	require.NoError(t, err)
	for i := range 3 {
		res, err := c.Update(r, []byte("k"), &expiringEditor{now: 0, until: int64(10 * (i + 1))})
		require.NoError(t, err)
		assert.Equal(t, []Placement{Claimed, Owned, Owned}[i], res.Placement)
		assert.Equal(t, 1, res.Attempts)
	}
	got, _ := until(t, c, r, "k")
	assert.Equal(t, int64(30), got)
	assert.Equal(t, 3, s.Len(), "one record, the sentinel and the secret")
}

func TestAnEditThatDeclinesWritesNothing(t *testing.T) {
	s := newMemStore()
	c := newCursor(t, s)
	r, err := NewRecords("meshlimit/test/r", 8)
	require.NoError(t, err)
	_, err = c.Update(r, []byte("k"), &expiringEditor{until: 10})
	require.NoError(t, err)
	res, err := c.Update(r, []byte("k"), &expiringEditor{until: 5})
	require.NoError(t, err)
	assert.False(t, res.Written)
	got, _ := until(t, c, r, "k")
	assert.Equal(t, int64(10), got)
}

func TestEveryKeyWithoutRoomSharesTheOneOverflowRecord(t *testing.T) {
	s := newMemStore()
	c := newCursor(t, s)
	r, err := NewRecords("meshlimit/test/r", 2)
	require.NoError(t, err)
	for i := range 3 {
		res, err := c.UpdateShared(r.OverflowKey(), &expiringEditor{until: int64(i + 1)})
		require.NoError(t, err)
		assert.Equal(t, Overflow, res.Placement)
		assert.True(t, res.Written)
	}
	v, _, err := s.Get(r.OverflowKey())
	require.NoError(t, err)
	_, p, ok := parseRecord(v)
	require.True(t, ok)
	assert.Equal(t, uint64(3), binary.LittleEndian.Uint64(p))
}

func TestNewRecordsRejectsSizesOutsideOneToMaxSlots(t *testing.T) {
	for _, n := range []int{0, -1, MaxSlots + 1} {
		_, err := NewRecords("p", n)
		assert.Error(t, err, "%d slots", n)
	}
}

func TestEveryVMOfAProxyReadsTheSameSecretAndAnotherProxyAnother(t *testing.T) {
	proxy := &yieldingStore{Store: newMemStore()}
	secrets := make(chan [2]uint64, 8)
	var wg sync.WaitGroup
	for range 8 { // eight VMs starting at once race to create the secret
		wg.Add(1)
		go func() {
			defer wg.Done()
			u, err := NewUpdater(proxy, "sentinel", 0)
			assert.NoError(t, err)
			secrets <- [2]uint64{u.k0, u.k1}
		}()
	}
	wg.Wait()
	close(secrets)
	first := <-secrets
	for s := range secrets {
		assert.Equal(t, first, s, "one secret per proxy")
	}
	other, err := NewUpdater(newMemStore(), "sentinel", 0)
	require.NoError(t, err)
	assert.NotEqual(t, first, [2]uint64{other.k0, other.k1}, "another proxy draws its own")
}

func TestAKeysFingerprintDependsOnTheProxysSecret(t *testing.T) {
	r, err := NewRecords("meshlimit/test/r", 1024)
	require.NoError(t, err)
	a, b := newCursor(t, newMemStore()), newCursor(t, newMemStore())
	ca, cb := r.candidates(a.u, []byte("alice")), r.candidates(b.u, []byte("alice"))
	assert.NotEqual(t, ca.fp, cb.fp, "a client that does not know the secret cannot compute it")
}
