package sharedstate

import (
	"testing"
	"time"

	"github.com/meshlimit/meshlimit/algorithms"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func newSettler(t testing.TB, l *Limiter) *Settler {
	t.Helper()
	return NewSettler(l.Updater())
}

func TestAdjustRefundsTheUnusedReservationOfTheKeyOnly(t *testing.T) {
	l := newLimiter(t, newMemStore())
	s := newSettler(t, l)
	tab := newTable(t, 16, tokenBucket(100, time.Hour))
	out, err := l.Take(tab, []byte("a"), t0, 80)
	require.NoError(t, err)
	require.True(t, out.Allowed)
	_, err = l.Take(tab, []byte("b"), t0, 80)
	require.NoError(t, err)
	_, err = s.Adjust(tab, []byte("a"), out.Placement, t0, t0, -70)
	require.NoError(t, err)
	out, err = l.Take(tab, []byte("a"), t0, 90)
	require.NoError(t, err)
	assert.True(t, out.Allowed, "a used 10, 90 remain")
	out, err = l.Take(tab, []byte("b"), t0, 21)
	require.NoError(t, err)
	assert.False(t, out.Allowed, "b's reservation is untouched")
}

func TestAdjustChargesAnOverRunAndTheKeyWaits(t *testing.T) {
	l := newLimiter(t, newMemStore())
	s := newSettler(t, l)
	tab := newTable(t, 16, tokenBucket(100, time.Hour))
	out, err := l.Take(tab, []byte("a"), t0, 10)
	require.NoError(t, err)
	_, err = s.Adjust(tab, []byte("a"), out.Placement, t0, t0, 140)
	require.NoError(t, err)
	out, err = l.Take(tab, []byte("a"), t0, 1)
	require.NoError(t, err)
	assert.False(t, out.Allowed)
}

func TestARefundForAKeyWithoutARecordWritesNothing(t *testing.T) {
	st := newMemStore()
	l := newLimiter(t, st)
	s := newSettler(t, l)
	tab := newTable(t, 16, tokenBucket(100, time.Hour))
	res, err := s.Adjust(tab, []byte("ghost"), Owned, t0, t0, -50)
	require.NoError(t, err)
	assert.False(t, res.Written)
	out, err := l.Take(tab, []byte("ghost"), t0, 100)
	require.NoError(t, err)
	assert.True(t, out.Allowed, "a fresh key, not a fuller one")
	out, err = l.Take(tab, []byte("ghost"), t0, 1)
	require.NoError(t, err)
	assert.False(t, out.Allowed)
}

func TestAReservationTakenFromTheOverflowIsSettledThere(t *testing.T) {
	l := newLimiter(t, newMemStore())
	s := newSettler(t, l)
	tab := newTable(t, 1, tokenBucket(100, time.Hour))
	_, err := l.Take(tab, []byte("owner"), t0, 1)
	require.NoError(t, err)
	var out Outcome
	for _, k := range []string{"x", "y", "z", "w", "v", "u"} {
		if out, err = l.Take(tab, []byte(k), t0, 90); err == nil && out.Placement == Overflow {
			_, err = s.Adjust(tab, []byte(k), out.Placement, t0, t0, -90)
			require.NoError(t, err)
			out, err = l.Take(tab, []byte(k), t0, 100)
			require.NoError(t, err)
			assert.True(t, out.Allowed, "the overflow state got its 90 back")
			return
		}
	}
	t.Fatal("no key went to the overflow state")
}

func TestUndoGivesBackATakeOfASlidingLogAndLeavesOtherTakesCounted(t *testing.T) {
	l := newLimiter(t, newMemStore())
	s := newSettler(t, l)
	tab := newTable(t, 16, algorithms.Limit{Kind: algorithms.SlidingLog, Quota: 2, Window: time.Minute})
	first, err := l.Take(tab, []byte("a"), t0, 1)
	require.NoError(t, err)
	_, err = l.Take(tab, []byte("a"), t0, 1) // another VM's take, after the first
	require.NoError(t, err)
	_, err = s.Undo(tab, []byte("a"), first.Placement, t0, t0, 1)
	require.NoError(t, err)
	out, err := l.Take(tab, []byte("a"), t0, 1)
	require.NoError(t, err)
	assert.True(t, out.Allowed, "the undone take left one unit")
	out, err = l.Take(tab, []byte("a"), t0, 1)
	require.NoError(t, err)
	assert.False(t, out.Allowed, "the other take is still counted")
}

// The overflow state is shared by every key that found no slot: a key's over-run settled there
// is carried up to one capacity per settle, so that one minted key cannot hold every newcomer in
// debt for 64 windows (issue 20 review, attack 10), while a key with its own record keeps the
// whole over-run.
func TestAnOverRunSettledIntoTheSharedOverflowLeavesAtMostOneCapacityOfDebt(t *testing.T) {
	const window = time.Minute
	l := newLimiter(t, newMemStore())
	s := newSettler(t, l)
	tab := newTable(t, 1, tokenBucket(100, window))
	_, err := l.Take(tab, []byte("owner"), t0, 1)
	require.NoError(t, err)
	var attacker string
	var out Outcome
	for _, k := range []string{"x", "y", "z", "w", "v", "u"} {
		if out, err = l.Take(tab, []byte(k), t0, 10); err == nil && out.Placement == Overflow {
			attacker = k
			break
		}
	}
	require.NotEmpty(t, attacker, "no key went to the overflow state")
	_, err = s.Adjust(tab, []byte(attacker), out.Placement, t0, t0, 15990)
	require.NoError(t, err)

	admittedAfter := func(after time.Duration) bool {
		for _, k := range []string{"n1", "n2", "n3", "n4", "n5", "n6"} {
			o, err := l.Take(tab, []byte(k), t0+int64(after), 1)
			require.NoError(t, err)
			if o.Placement == Overflow {
				return o.Allowed
			}
		}
		t.Fatal("no newcomer went to the overflow state")
		return false
	}
	assert.False(t, admittedAfter(time.Second), "the over-run is charged to the overflow")
	assert.True(t, admittedAfter(2*window+time.Second), "newcomers are admitted again within two windows, not 64")

	// A key with its own record carries its whole over-run.
	own := newTable(t, 16, tokenBucket(100, window))
	o, err := l.Take(own, []byte("owner"), t0, 10)
	require.NoError(t, err)
	require.NotEqual(t, Overflow, o.Placement)
	_, err = s.Adjust(own, []byte("owner"), o.Placement, t0, t0, 15990)
	require.NoError(t, err)
	o, err = l.Take(own, []byte("owner"), t0+int64(10*window), 1)
	require.NoError(t, err)
	assert.False(t, o.Allowed, "a key's own debt is carried whole")
}

// A reservation decided in the shared overflow reserves its bound (the cost's max), so that what a
// slotless key uses is never owed to the state every newcomer shares; a key with its own record
// reserves its estimate.
func TestAReservationDecidedInTheOverflowReservesItsBound(t *testing.T) {
	l := newLimiter(t, newMemStore())
	tab := newTable(t, 1, tokenBucket(1000, time.Minute))
	out, err := l.TakeBounded(tab, []byte("owner"), t0, 10, 500)
	require.NoError(t, err)
	require.NotEqual(t, Overflow, out.Placement)
	assert.Equal(t, int64(10), out.Cost, "a key of its own reserves its estimate")
	for _, k := range []string{"x", "y", "z", "w", "v", "u"} {
		out, err = l.TakeBounded(tab, []byte(k), t0, 10, 500)
		require.NoError(t, err)
		if out.Placement == Overflow {
			assert.Equal(t, int64(500), out.Cost, "the overflow reserves the bound")
			assert.True(t, out.Allowed)
			out, err = l.TakeBounded(tab, []byte(k+"2"), t0, 10, 500)
			require.NoError(t, err)
			assert.True(t, out.Allowed, "a second bound fits 1000")
			out, err = l.TakeBounded(tab, []byte(k+"3"), t0, 10, 500)
			require.NoError(t, err)
			assert.False(t, out.Allowed, "a third does not: the overflow holds two reservations of 500")
			return
		}
	}
	t.Fatal("no key went to the overflow state")
}
