package sharedstate

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/algorithms"
)

var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC).UnixNano()

func tokenBucket(quota int64, window time.Duration) algorithms.Limit {
	return algorithms.Limit{Kind: algorithms.TokenBucket, Quota: quota, Window: window}
}

func newLimiter(t testing.TB, s Store) *Limiter {
	t.Helper()
	u, err := NewUpdater(s, "meshlimit/test/sentinel", 0)
	require.NoError(t, err)
	return NewLimiter(u)
}

func newTable(t testing.TB, slots int, limits ...algorithms.Limit) *Table {
	t.Helper()
	tab, err := NewTable("meshlimit/test/rule", slots, limits, nil)
	require.NoError(t, err)
	return tab
}

func TestTakeAdmitsABurstUpToTheCapacityThenDenies(t *testing.T) {
	l := newLimiter(t, newMemStore())
	tab := newTable(t, 16, tokenBucket(3, time.Second))
	for i := range 3 {
		out, err := l.Take(tab, []byte("client"), t0, 1)
		require.NoError(t, err)
		assert.True(t, out.Allowed, "request %d", i+1)
		assert.Equal(t, int64(2-i), out.Decisions[0].Remaining)
	}
	out, err := l.Take(tab, []byte("client"), t0, 1)
	require.NoError(t, err)
	assert.False(t, out.Allowed, "the 4th request in a burst of 3")
	assert.Positive(t, out.Decisions[0].RetryAfter)
	out, err = l.Take(tab, []byte("other"), t0, 1)
	require.NoError(t, err)
	assert.True(t, out.Allowed, "another key has its own bucket")
}

func TestTakeConsumesFromNoLimitWhenAnyLimitDenies(t *testing.T) {
	s := newMemStore()
	l := newLimiter(t, s)
	perSecond, perMinute := tokenBucket(2, time.Second), tokenBucket(3, time.Minute)
	tab := newTable(t, 4, perSecond, perMinute)
	key := []byte("k")
	steps := []struct {
		at        time.Duration
		allowed   bool
		remaining [2]int64
	}{
		{0, true, [2]int64{1, 2}},
		{0, true, [2]int64{0, 1}},
		{0, false, [2]int64{0, 1}},               // the per-second limit denies; the per-minute one keeps its 1
		{time.Second, true, [2]int64{1, 0}},      // a second later only the per-minute limit is nearly spent
		{time.Second, false, [2]int64{1, 0}},     // the per-minute limit denies; the per-second one keeps its 1
		{2 * time.Second, false, [2]int64{2, 0}}, // still nothing in the minute
	}
	for i, st := range steps {
		out, err := l.Take(tab, key, t0+int64(st.at), 1)
		require.NoError(t, err)
		assert.Equal(t, st.allowed, out.Allowed, "step %d", i)
		assert.Equal(t, st.remaining[0], out.Decisions[0].Remaining, "step %d: per-second remaining", i)
		assert.Equal(t, st.remaining[1], out.Decisions[1].Remaining, "step %d: per-minute remaining", i)
	}
}

// yieldingStore gives other goroutines a chance to run between every read and write, so that CAS races
// actually happen on a 2-core machine.
type yieldingStore struct {
	Store
	sets, mismatches atomic.Int64
}

func (y *yieldingStore) Get(key string) ([]byte, uint32, error) {
	runtime.Gosched()
	return y.Store.Get(key)
}

func (y *yieldingStore) Set(key string, value []byte, cas uint32) error {
	runtime.Gosched()
	err := y.Store.Set(key, value, cas)
	y.sets.Add(1)
	if err != nil {
		y.mismatches.Add(1)
	}
	return err
}

func TestEightWorkersOnOneKeyAdmitExactlyTheCapacity(t *testing.T) {
	const workers, perWorker, capacity = 8, 40, 100
	store := &yieldingStore{Store: newMemStore()}
	tab := newTable(t, 64, tokenBucket(capacity, time.Hour))
	var admitted, exhausted, maxAttempts atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		// The yields force a convoy, under which one request can lose a race to nearly every admission
		// of the others (up to capacity-1); the default bound (DefaultMaxAttempts) must cover that.
		u, err := NewUpdater(store, "sentinel", 0)
		require.NoError(t, err)
		l := NewLimiter(u)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range perWorker {
				out, err := l.Take(tab, []byte("hot"), t0, 1) // a frozen clock: nothing refills
				for m := maxAttempts.Load(); int64(out.Attempts) > m && !maxAttempts.CompareAndSwap(m, int64(out.Attempts)); m = maxAttempts.Load() {
				}
				if err != nil {
					exhausted.Add(1)
					continue
				}
				if out.Allowed {
					admitted.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	require.Zero(t, exhausted.Load(), "no update may run out of attempts here")
	assert.Equal(t, int64(capacity), admitted.Load(), "not one more, not one less")
	t.Logf("%d sets, %d lost CAS races, at most %d attempts for one request", store.sets.Load(), store.mismatches.Load(), maxAttempts.Load())
}

func TestAMillionDistinctClientsKeepTheStoreWithinTheTable(t *testing.T) {
	n := 1_000_000
	if testing.Short() {
		n = 100_000
	}
	const slots = 4096
	s := newMemStore()
	l := newLimiter(t, s)
	tab := newTable(t, slots, tokenBucket(10, time.Second))
	key := make([]byte, 0, 16)
	now := t0
	overflow := 0
	for i := range n {
		ip := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
		key = ip.AppendTo(key[:0])
		now += int64(time.Microsecond) // a million clients over one second
		out, err := l.Take(tab, key, now, 1)
		require.NoError(t, err)
		if out.Placement == Overflow {
			overflow++
		}
	}
	assert.LessOrEqual(t, s.Len(), slots+3, "the table's slots, its overflow state, the sentinel and the secret")
	t.Logf("%d clients: %d keys, %d bytes in the store, %d decided in the overflow state", n, s.Len(), s.Bytes(), overflow)
}

func TestAKeyWithoutRoomIsDecidedAgainstTheOverflowStateNeverAnotherKeys(t *testing.T) {
	l := newLimiter(t, newMemStore())
	tab := newTable(t, 1, tokenBucket(2, time.Second)) // one slot: the second key finds no room
	out, err := l.Take(tab, []byte("first"), t0, 1)
	require.NoError(t, err)
	require.True(t, out.Allowed)
	assert.Equal(t, Claimed, out.Placement)

	for i, want := range []bool{true, true, false} {
		out, err = l.Take(tab, []byte("second"), t0, 1)
		require.NoError(t, err)
		assert.Equal(t, Overflow, out.Placement, "the slot is held by an active key")
		assert.Equal(t, want, out.Allowed, "request %d: the overflow state has the table's own capacity of 2", i+1)
	}
	out, err = l.Take(tab, []byte("first"), t0, 1)
	require.NoError(t, err)
	assert.Equal(t, Owned, out.Placement)
	assert.True(t, out.Allowed, "the occupant still has its second token: nobody else spent it")
	assert.Equal(t, int64(0), out.Decisions[0].Remaining)

	later := t0 + int64(2*time.Second) // the occupant's bucket is full again: it is idle
	out, err = l.Take(tab, []byte("second"), later, 1)
	require.NoError(t, err)
	assert.Equal(t, Evicted, out.Placement, "an idle occupant is replaced")
	assert.True(t, out.Allowed)
	assert.Equal(t, int64(1), out.Decisions[0].Remaining, "the new occupant starts from a full bucket")
}

func TestConfiguredOverflowLimitsDecideTheKeysWithoutRoom(t *testing.T) {
	l := newLimiter(t, newMemStore())
	tab, err := NewTable("meshlimit/test/rule", 1, []algorithms.Limit{tokenBucket(5, time.Second)},
		[]algorithms.Limit{tokenBucket(1, time.Second), tokenBucket(100, time.Hour)})
	require.NoError(t, err)
	_, err = l.Take(tab, []byte("occupant"), t0, 1)
	require.NoError(t, err)
	out, err := l.Take(tab, []byte("newcomer"), t0, 1)
	require.NoError(t, err)
	require.Equal(t, Overflow, out.Placement)
	require.Len(t, out.Decisions, 2, "one decision per overflow limit")
	assert.True(t, out.Allowed)
	out, err = l.Take(tab, []byte("another-newcomer"), t0, 1)
	require.NoError(t, err)
	assert.False(t, out.Allowed, "all newcomers together get the overflow's 1/s")
	assert.Equal(t, int64(99), out.Decisions[1].Remaining, "the hourly overflow limit would have admitted it")
}

func TestAnUnreadableSlotIsReplacedNotFatal(t *testing.T) {
	s := newMemStore()
	l := newLimiter(t, s)
	tab := newTable(t, 1, tokenBucket(5, time.Second))
	require.NoError(t, s.Set(string(tab.records.SlotKey(nil, 0)), []byte("garbage from an older version"), 0))
	out, err := l.Take(tab, []byte("k"), t0, 1)
	require.NoError(t, err)
	assert.True(t, out.Allowed)
	assert.Equal(t, Claimed, out.Placement)
	assert.Equal(t, int64(4), out.Decisions[0].Remaining)
}

// mismatchStore loses every CAS race.
type mismatchStore struct{ Store }

func (m mismatchStore) Set(string, []byte, uint32) error { return ErrCasMismatch }

func TestTakeGivesUpWithErrContentionAfterMaxAttempts(t *testing.T) {
	base := newMemStore()
	require.NoError(t, base.Set("sentinel", nil, 0))
	require.NoError(t, base.Set("sentinel/secret", make([]byte, 16), 0))
	u, err := NewUpdater(mismatchStore{base}, "sentinel", 5)
	require.NoError(t, err)
	out, err := NewLimiter(u).Take(newTable(t, 8, tokenBucket(5, time.Second)), []byte("k"), t0, 1)
	assert.ErrorIs(t, err, ErrContention)
	assert.Equal(t, 5, out.Attempts)
}

func TestTablesWithDifferentPrefixesNeverShareSlots(t *testing.T) {
	a, err := NewTable("p/rule/aaaa", 8, []algorithms.Limit{tokenBucket(1, time.Second)}, nil)
	require.NoError(t, err)
	b, err := NewTable("p/rule/bbbb", 8, []algorithms.Limit{tokenBucket(1, time.Second)}, nil)
	require.NoError(t, err)
	assert.NotEqual(t, string(a.records.SlotKey(nil, 0)), string(b.records.SlotKey(nil, 0)))
	l := newLimiter(t, newMemStore())
	out, err := l.Take(a, []byte("k"), t0, 1)
	require.NoError(t, err)
	require.True(t, out.Allowed)
	out, err = l.Take(b, []byte("k"), t0, 1)
	require.NoError(t, err)
	assert.True(t, out.Allowed, "a changed limit (new fingerprint, new prefix) starts fresh")
}

func TestNewTableRejectsBadSizesAndLimits(t *testing.T) {
	ok := []algorithms.Limit{tokenBucket(1, time.Second)}
	tests := []struct {
		name     string
		slots    int
		limits   []algorithms.Limit
		overflow []algorithms.Limit
	}{
		{"zero slots", 0, ok, nil},
		{"more slots than MaxSlots", MaxSlots + 1, ok, nil},
		{"no limits", 8, nil, nil},
		{"an invalid limit", 8, []algorithms.Limit{{Kind: algorithms.TokenBucket, Quota: 0, Window: time.Second}}, nil},
		{"an invalid overflow limit", 8, ok, []algorithms.Limit{{Kind: algorithms.TokenBucket, Quota: 5, Window: 0}}},
		{"an empty overflow list", 8, ok, []algorithms.Limit{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewTable("p", tc.slots, tc.limits, tc.overflow)
			assert.Error(t, err)
		})
	}
}

// aliasStore is a single-goroutine Store that copies a value into one buffer it reuses, as the
// filter's host does, and reuses value buffers, so that a benchmark measures the Limiter's own
// allocations.
type aliasStore struct {
	m   map[string]*memEntry
	cas uint32
	buf []byte
}

func (a *aliasStore) Get(key string) ([]byte, uint32, error) {
	e, ok := a.m[key]
	if !ok {
		return nil, 0, ErrNotFound
	}
	a.buf = append(a.buf[:0], e.value...)
	return a.buf, e.cas, nil
}

func (a *aliasStore) Set(key string, value []byte, cas uint32) error {
	e, ok := a.m[key]
	if ok && cas != 0 && cas != e.cas {
		return ErrCasMismatch
	}
	a.cas++
	if !ok {
		e = &memEntry{}
		a.m[string([]byte(key))] = e
	}
	e.value = append(e.value[:0], value...)
	e.cas = a.cas
	return nil
}

func TestTakeAllocatesNothingOnceWarm(t *testing.T) {
	l := newLimiter(t, &aliasStore{m: map[string]*memEntry{}})
	tab := newTable(t, 1024, tokenBucket(1_000_000, time.Second), tokenBucket(100_000_000, time.Hour))
	key := []byte("203.0.113.7")
	now := t0
	_, err := l.Take(tab, key, now, 1)
	require.NoError(t, err)
	allocs := testing.AllocsPerRun(200, func() {
		now += 1000
		if _, err := l.Take(tab, key, now, 1); err != nil {
			t.Fatal(err)
		}
	})
	assert.Zero(t, allocs)
}

func BenchmarkTake(b *testing.B) {
	for _, kind := range []algorithms.Kind{algorithms.TokenBucket, algorithms.FixedWindow, algorithms.SlidingWindow} {
		b.Run(kind.String(), func(b *testing.B) {
			l := newLimiter(b, &aliasStore{m: map[string]*memEntry{}})
			tab := newTable(b, 4096, algorithms.Limit{Kind: kind, Quota: 1_000_000, Window: time.Second})
			keys := make([][]byte, 1000)
			for i := range keys {
				keys[i] = binary.BigEndian.AppendUint32(nil, uint32(i))
			}
			now := t0
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				now += 1000
				if _, err := l.Take(tab, keys[i%len(keys)], now, 1); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}

// BenchmarkTakeLimits measures one key's Take against a rule of 1, 4 or 8 token-bucket limits that all
// admit (the e2e instruction bench's "limits" table: a billion and more per second, minute, hour, day).
func BenchmarkTakeLimits(b *testing.B) {
	windows := []time.Duration{time.Second, time.Minute, time.Hour, 24 * time.Hour}
	for _, n := range []int{1, 4, 8} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			var limits []algorithms.Limit
			for i := range n {
				limits = append(limits, tokenBucket(1_000_000_000+int64(i), windows[i%len(windows)]))
			}
			l := newLimiter(b, &aliasStore{m: map[string]*memEntry{}})
			tab := newTable(b, 4096, limits...)
			key := []byte("203.0.113.77")
			now := t0
			b.ReportAllocs()
			for b.Loop() {
				now += 1000
				if out, err := l.Take(tab, key, now, 1); err != nil || !out.Allowed {
					b.Fatal(err, out.Allowed)
				}
			}
		})
	}
}

func ExampleLimiter_Take() {
	store := newMemStore() // in the filter: the proxy's shared data, through its host port
	u, _ := NewUpdater(store, "meshlimit/example/sentinel", 0)
	tab, _ := NewTable("meshlimit/example/per-ip", 10_000, []algorithms.Limit{
		{Kind: algorithms.TokenBucket, Quota: 2, Window: time.Second},
	}, nil)
	l := NewLimiter(u)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	for range 3 {
		out, _ := l.Take(tab, []byte("192.0.2.1"), now, 1)
		fmt.Println(out.Allowed, out.Decisions[0].Remaining)
	}
	// Output:
	// true 1
	// true 0
	// false 0
}

// TestADeniedRequestReportsTheLimitsThatWouldHaveAdmittedItUncharged is finding 10 of issue 10: a limit
// that admitted a request another limit denied reports exactly what it reported before the request
// (remaining and reset), not what it would be had the request been charged; a full one reports a reset
// of 0.
func TestADeniedRequestReportsTheLimitsThatWouldHaveAdmittedItUncharged(t *testing.T) {
	l := newLimiter(t, newMemStore())
	burst, hourly, big := tokenBucket(2, time.Minute), tokenBucket(100, time.Hour), tokenBucket(100, time.Minute)
	tab, err := NewTable("meshlimit/test/rule", 8, []algorithms.Limit{burst, hourly}, nil)
	require.NoError(t, err)
	var last Outcome
	for range 2 {
		last, err = l.Take(tab, []byte("k"), t0, 1)
		require.NoError(t, err)
		require.True(t, last.Allowed)
	}
	before := last.Decisions[1]
	out, err := l.Take(tab, []byte("k"), t0, 1)
	require.NoError(t, err)
	require.False(t, out.Allowed, "the burst of 2 is spent")
	assert.Equal(t, before, out.Decisions[1], "the hourly limit reports what it did before the denied request")
	assert.Equal(t, int64(98), out.Decisions[1].Remaining)
	assert.Equal(t, 72*time.Second, out.Decisions[1].Reset, "two units of 36 s, not three")

	three, err := NewTable("meshlimit/test/third", 8, []algorithms.Limit{big, tokenBucket(1, time.Hour)}, nil)
	require.NoError(t, err)
	out, err = l.Take(three, []byte("k"), t0, 2) // the second limit's capacity is 1: never admitted
	require.NoError(t, err)
	require.False(t, out.Allowed)
	assert.Equal(t, algorithms.Decision{Allowed: true, Limit: 100, Remaining: 100, EffectiveWindow: 600 * time.Millisecond}, out.Decisions[0],
		"full: r=100, reset 0, one unit back 0.6 s after spending them all")
}
