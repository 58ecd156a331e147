package sharedstate

import (
	"encoding/hex"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/algorithms"
)

// takeAsBefore is Take as the builds before in-place edits ran it: every record parsed, decided
// and written anew (what a VM of the previous module version does on the same host).
func takeAsBefore(l *Limiter, t *Table, key []byte, now, cost int64) (Outcome, error) {
	return l.takeBounded(t, key, now, cost, cost, nil)
}

// knownSecretStore is a store whose proxy secret is fixed, so that a key's fingerprint and slots
// are those a record written by another build under the same secret has.
func knownSecretStore(t *testing.T) *memStore {
	s := newMemStore()
	require.NoError(t, s.Set("meshlimit/test/sentinel", []byte("meshlimit"), 0))
	require.NoError(t, s.Set("meshlimit/test/sentinel/secret", []byte("0123456789abcdef"), 0))
	return s
}

func threeKinds() []algorithms.Limit {
	return []algorithms.Limit{
		tokenBucket(10, time.Minute),
		{Kind: algorithms.FixedWindow, Quota: 100, Window: time.Hour},
		{Kind: algorithms.SlidingWindow, Quota: 1000, Window: 24 * time.Hour},
	}
}

// TestARecordThePreviousBuildWroteIsDecidedAndRewrittenAsThatBuildWould pins the record format
// across a rollout: the bytes are those main at 8947a39 (before in-place edits) wrote for key
// 192.0.2.1 after three requests under the secret "0123456789abcdef", and what it wrote and decided
// on the fourth. A VM of this build that finds that record decides and writes exactly the same, so
// VMs of both builds share one key's state on one host.
func TestARecordThePreviousBuildWroteIsDecidedAndRewrittenAsThatBuildWould(t *testing.T) {
	const slotKey = "meshlimit/test/rule/v2/b"
	afterThree, _ := hex.DecodeString("02749cde90236c472e03111100066169096f18800000000000000000111300066169085c7000000000000000000319150006615ef970c00000000000000000000000000000000003")
	afterFour, _ := hex.DecodeString("02749cde90236c472e0311110006616909caa6000000000000000000111300066169085c7000000000000000000419150006615ef970c00000000000000000000000000000000004")
	s := knownSecretStore(t)
	require.NoError(t, s.Set(slotKey, afterThree, 0))
	l := newLimiter(t, s)
	tab, err := NewTable("meshlimit/test/rule", 64, threeKinds(), nil)
	require.NoError(t, err)
	require.NotZero(t, tab.layout.size, "three kinds of fixed-size states: a fixed layout")

	out, err := l.Take(tab, []byte("192.0.2.1"), t0+3*int64(time.Second), 1)
	require.NoError(t, err)
	assert.Equal(t, Owned, out.Placement, "the record the other build wrote is the key's own")
	assert.Equal(t, []algorithms.Decision{
		{Allowed: true, Limit: 10, Remaining: 6, Reset: 21 * time.Second, EffectiveWindow: 3 * time.Second},
		{Allowed: true, Limit: 100, Remaining: 96, Reset: 59*time.Minute + 57*time.Second, EffectiveWindow: 59*time.Minute + 57*time.Second},
		{Allowed: true, Limit: 1000, Remaining: 996, Reset: 35*time.Hour + 59*time.Minute + 57*time.Second, EffectiveWindow: 12*time.Hour + time.Minute + 23400*time.Millisecond},
	}, out.Decisions, "the previous build's decisions on its fourth request")
	v, _, err := s.Get(slotKey)
	require.NoError(t, err)
	assert.Equal(t, hex.EncodeToString(afterFour), hex.EncodeToString(v), "the bytes the previous build wrote")
}

// TestTheInPlaceEditWritesTheBytesAndDecisionsOfTheGeneralPath runs one sequence of requests
// (admitted, denied, after refills) through both paths, each on its own store, and compares what
// they decide and store after every request, for every kind and mix of kinds.
func TestTheInPlaceEditWritesTheBytesAndDecisionsOfTheGeneralPath(t *testing.T) {
	tests := []struct {
		name   string
		limits []algorithms.Limit
	}{
		{"a token bucket", []algorithms.Limit{tokenBucket(3, time.Second)}},
		{"a leaky bucket", []algorithms.Limit{{Kind: algorithms.LeakyBucket, Quota: 3, Window: time.Second}}},
		{"a fixed window", []algorithms.Limit{{Kind: algorithms.FixedWindow, Quota: 3, Window: time.Second}}},
		{"a calendar day", []algorithms.Limit{{Kind: algorithms.FixedWindow, Quota: 3, Calendar: algorithms.Calendar{Unit: algorithms.CalendarDay}}}},
		{"a sliding window", []algorithms.Limit{{Kind: algorithms.SlidingWindow, Quota: 3, Window: time.Second}}},
		{"three kinds, the tightest last", append(threeKinds(), tokenBucket(2, time.Second))},
		{"a sliding log (no fixed layout: both take the general path)", []algorithms.Limit{{Kind: algorithms.SlidingLog, Quota: 3, Window: time.Second}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			inPlace, before := knownSecretStore(t), knownSecretStore(t)
			li, lb := newLimiter(t, inPlace), newLimiter(t, before)
			tab, err := NewTable("meshlimit/test/rule", 4, tc.limits, nil)
			require.NoError(t, err)
			now := t0
			for i := range 40 {
				now += int64(i%7) * int64(97*time.Millisecond)
				cost := int64(1 + i%3)
				key := []byte{byte('a' + i%5)}
				oi, erri := li.Take(tab, key, now, cost)
				ob, errb := takeAsBefore(lb, tab, key, now, cost)
				require.Equal(t, errb, erri, "request %d", i)
				require.Equal(t, ob, oi, "request %d", i)
				require.Equal(t, before.entries, inPlace.entries, "request %d: the stored records", i)
			}
		})
	}
}

// TestVMsOfThePreviousAndThisBuildOnOneKeyAdmitExactlyTheCapacity is a rollout: eight workers on
// one key with lost CAS races, four deciding as the previous build (parse and re-serialize), four
// editing in place, admit exactly the capacity between them.
func TestVMsOfThePreviousAndThisBuildOnOneKeyAdmitExactlyTheCapacity(t *testing.T) {
	const workers, perWorker, capacity = 8, 40, 100
	store := &yieldingStore{Store: newMemStore()}
	tab := newTable(t, 64, tokenBucket(capacity, time.Hour), algorithms.Limit{Kind: algorithms.FixedWindow, Quota: 2 * capacity, Window: time.Hour})
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		l := newLimiter(t, store)
		take := l.Take
		if w%2 == 0 {
			take = func(t *Table, key []byte, now, cost int64) (Outcome, error) {
				return takeAsBefore(l, t, key, now, cost)
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range perWorker {
				out, err := take(tab, []byte("hot"), t0, 1)
				if err == nil && out.Allowed {
					admitted.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	assert.Equal(t, int64(capacity), admitted.Load(), "not one more, not one less")
	assert.Positive(t, store.mismatches.Load(), "the workers raced")
}

// TestARecordABuggyOrHostileWriterLeftNeitherFailsNorOpensTheKey: whatever a writer of the shared
// data left in a key's own record, a Take reports no error (which would leave the request to the
// rule's failure mode, allow by default, on every request) and the key is limited from then on:
// a state that does not decode is decided as a fresh one and replaced.
func TestARecordABuggyOrHostileWriterLeftNeitherFailsNorOpensTheKey(t *testing.T) {
	const capacity = 5
	valid := func(l *Limiter, tab *Table) []byte { // the key's record after one admitted request
		_, err := l.Take(tab, []byte("k"), t0, 1)
		require.NoError(t, err)
		v, _, err := l.Updater().Read(string(tab.records.SlotKey(nil, 0)))
		require.NoError(t, err)
		return append([]byte(nil), v...)
	}
	tests := []struct {
		name   string
		mangle func(rec []byte) []byte // from a valid record of the key
	}{
		{"a state of another kind", func(r []byte) []byte { r[recordHeader+2] = 0x13; return r }},
		{"a state of another version", func(r []byte) []byte { r[recordHeader+2] = 0x71; return r }},
		{"a time out of range", func(r []byte) []byte { r[recordHeader+3] = 0xff; return r }},
		{"a fraction out of range", func(r []byte) []byte { r[recordHeader+11] = 0xff; return r }},
		{"a wrong length byte", func(r []byte) []byte { r[recordHeader+1] = 16; return r }},
		{"a wrong count", func(r []byte) []byte { r[recordHeader] = 2; return r }},
		{"a state cut short", func(r []byte) []byte { return r[:len(r)-1] }},
		{"a state with a byte more", func(r []byte) []byte { return append(r, 0) }},
		{"no payload", func(r []byte) []byte { return r[:recordHeader] }},
		{"a zero state of the right size", func(r []byte) []byte { clear(r[recordHeader+2:]); return r }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := knownSecretStore(t)
			l := newLimiter(t, s)
			tab := newTable(t, 1, tokenBucket(capacity, time.Hour))
			rec := tc.mangle(valid(l, tab))
			require.NoError(t, s.Set(string(tab.records.SlotKey(nil, 0)), rec, 0))
			admitted := 0
			for i := range capacity + 3 {
				out, err := l.Take(tab, []byte("k"), t0, 1)
				require.NoError(t, err, "request %d", i)
				if out.Allowed {
					admitted++
				}
			}
			assert.LessOrEqual(t, admitted, capacity, "limited from then on")
			assert.Positive(t, admitted, "the record was replaced by a valid one")
		})
	}
}

// FuzzTheInPlaceEditDecidesAnyRecordAsTheGeneralPath: for any bytes in a key's own record (its
// header, then anything), the in-place edit and the general path decide alike, store the same
// bytes, never fail, and a key is then admitted at most its capacity in a frozen hour.
func FuzzTheInPlaceEditDecidesAnyRecordAsTheGeneralPath(f *testing.F) {
	f.Add([]byte{1, 17, 0x11, 0, 6, 0x61, 0x69, 9, 0x6f, 0x18, 0x80, 0, 0, 0, 0, 0, 0, 0, 0}, uint8(1))
	f.Add([]byte{2, 17, 0x11, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 25, 0x15, 1}, uint8(3))
	f.Add([]byte{}, uint8(2))
	f.Fuzz(func(t *testing.T, payload []byte, cost uint8) {
		limits := []algorithms.Limit{tokenBucket(5, time.Hour), {Kind: algorithms.SlidingWindow, Quota: 7, Window: time.Hour}}
		tab, err := NewTable("meshlimit/test/rule", 1, limits, nil)
		require.NoError(t, err)
		inPlace, before := knownSecretStore(t), knownSecretStore(t)
		li, lb := newLimiter(t, inPlace), newLimiter(t, before)
		cands := tab.records.candidates(li.Updater(), []byte("k"))
		rec := append(append([]byte{recordVersion}, le64(cands.fp)...), payload...)
		for _, s := range []*memStore{inPlace, before} {
			require.NoError(t, s.Set(string(tab.records.SlotKey(nil, 0)), rec, 0))
		}
		admitted := int64(0)
		for i := range 8 {
			c := int64(cost%6) + 1
			oi, erri := li.Take(tab, []byte("k"), t0, c)
			ob, errb := takeAsBefore(lb, tab, []byte("k"), t0, c)
			require.NoError(t, erri, "request %d", i)
			require.NoError(t, errb, "request %d", i)
			require.Equal(t, ob, oi, "request %d", i)
			require.Equal(t, before.entries, inPlace.entries, "request %d", i)
			if oi.Allowed && oi.Placement != Overflow {
				admitted += c
			}
		}
		assert.LessOrEqual(t, admitted, int64(5), "never past the token bucket's capacity in a frozen hour")
	})
}

func le64(u uint64) []byte {
	b := make([]byte, 8)
	for i := range b {
		b[i] = byte(u >> (8 * i))
	}
	return b
}

func TestTakeLocalEditsARecordOfFixedLayoutInPlaceAsItWouldRewriteIt(t *testing.T) {
	l := newLimiter(t, newMemStore())
	tab := newTable(t, 1, tokenBucket(2, time.Second), algorithms.Limit{Kind: algorithms.FixedWindow, Quota: 3, Window: time.Second})
	var rec, copied []byte
	for i := range 4 {
		out, err := l.TakeLocal(tab, &rec, t0, 1)
		require.NoError(t, err)
		assert.Equal(t, i < 2, out.Allowed, "request %d", i)
		if i == 0 {
			copied = rec
		}
	}
	require.NotEmpty(t, rec)
	assert.Same(t, &copied[0], &rec[0], "later requests rewrote the first record's memory")
	d, err := tab.limits[0].Peek(tab.layout.state(rec, 0), t0)
	require.NoError(t, err)
	assert.Equal(t, int64(0), d.Remaining, "both admitted requests are in the record")
}

// TestAKeyRememberedByTheCursorIsUpdatedWhereAFreshCursorWouldUpdateIt compares a long-lived
// Limiter, whose Cursor remembers keys, with a new Limiter for every request, over keys that share
// the memo's places, a key too long to remember, one key in two tables and a table whose candidates
// fill up, on stores of the same secret: the same decisions and the same stored records throughout.
func TestAKeyRememberedByTheCursorIsUpdatedWhereAFreshCursorWouldUpdateIt(t *testing.T) {
	long := make([]byte, memoMaxKey+1)
	keys := [][]byte{[]byte("192.0.2.1"), []byte("192.0.2.17"), []byte("198.51.100.1"), long, []byte("k"), {}}
	for i := range 40 {
		keys = append(keys, []byte{byte(i), 'x'}) // more keys than memo places
	}
	warm, cold := knownSecretStore(t), knownSecretStore(t)
	lw := newLimiter(t, warm)
	small, err := NewTable("meshlimit/test/small", 8, []algorithms.Limit{tokenBucket(3, time.Minute)}, nil)
	require.NoError(t, err)
	other, err := NewTable("meshlimit/test/other", 64, []algorithms.Limit{tokenBucket(3, time.Minute)}, nil)
	require.NoError(t, err)
	now := t0
	for i := range 600 {
		now += int64(7 * time.Second)
		key, tab := keys[(i*7)%len(keys)], small
		if i%3 == 0 {
			tab = other
		}
		ow, errw := lw.Take(tab, key, now, 1)
		oc, errc := newLimiter(t, cold).Take(tab, key, now, 1)
		require.Equal(t, errc, errw, "request %d", i)
		require.Equal(t, oc, ow, "request %d", i)
		require.Equal(t, cold.entries, warm.entries, "request %d: the stored records", i)
	}
}

func TestAStateThatDoesNotDecodeAmongSeveralIsDecidedFreshAndTheOthersWhereTheyLie(t *testing.T) {
	s := knownSecretStore(t)
	l := newLimiter(t, s)
	tab := newTable(t, 1, tokenBucket(5, time.Hour), tokenBucket(7, time.Hour), tokenBucket(9, time.Hour))
	_, err := l.Take(tab, []byte("k"), t0, 2)
	require.NoError(t, err)
	key := string(tab.records.SlotKey(nil, 0))
	rec, _, err := l.Updater().Read(key)
	require.NoError(t, err)
	rec = append([]byte(nil), rec...)
	off := recordHeader + int(tab.layout.offs[1])
	clear(rec[off : off+int(tab.layout.lens[1])]) // the second limit's state: the right size, no valid header
	require.NoError(t, s.Set(key, rec, 0))

	out, err := l.Take(tab, []byte("k"), t0, 1)
	require.NoError(t, err)
	require.True(t, out.Allowed, "admitted: the broken state is decided as a fresh one")
	remaining := []int64{out.Decisions[0].Remaining, out.Decisions[1].Remaining, out.Decisions[2].Remaining}
	assert.Equal(t, []int64{5 - 3, 7 - 1, 9 - 3}, remaining, "the others decided on their own states")
	out, err = l.Take(tab, []byte("k"), t0, 1)
	require.NoError(t, err)
	assert.Equal(t, int64(7-2), out.Decisions[1].Remaining, "the fresh state was written back")
}
