package sharedstate

import (
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/algorithms"
)

// The isolation property: whatever stream of other keys arrives, a victim key is decided exactly as if
// it were alone whenever its own state matters. checkIsolation replays a stream that the input bytes
// describe against a small table shared by two victims and any number of minted keys, and keeps for each
// victim a reference state that only the victim's own requests touch (a limiter with nobody else).
//
//   - While a victim's reference state is not idle, the victim must be decided in its own record
//     (placement Owned) with exactly the reference's decision: nobody wrote into its state or evicted it.
//   - When its reference state is idle (equivalent to fresh), the victim may have lost its slot; if it
//     is decided in a record of its own (Claimed or Evicted), the decision is still the reference's.
//   - When it is decided in the overflow state, its own state is not touched, so the reference is not
//     charged either.
//
// Input layout: byte 0 picks the slots (1 to 8), byte 1 the algorithm, byte 2 the quota (1 to 8); then
// every 3 bytes are one request: who (a victim when sel%4 == 0, else a minted key named by arg and
// sel), its cost, and how far the clock moves first (0 to 255 × 10 ms). A minted key with sel%4 == 3
// and an odd arg is forgotten instead (an admin reset), and so is a victim with arg 255 (its
// reference starts afresh): forgetting a key never touches another's state.
func checkIsolation(t testing.TB, in []byte) {
	if len(in) < 3 {
		return
	}
	kinds := []algorithms.Kind{algorithms.TokenBucket, algorithms.FixedWindow, algorithms.SlidingWindow, algorithms.SlidingLog, algorithms.LeakyBucket}
	limit := algorithms.Limit{Kind: kinds[int(in[1])%len(kinds)], Quota: 1 + int64(in[2]%8), Window: time.Second}
	tab, err := NewTable("meshlimit/fuzz/rule", 1+int(in[0]%8), []algorithms.Limit{limit}, nil)
	require.NoError(t, err)
	l := newLimiter(t, newMemStore())
	victims := [2]string{"alice", "bob"}
	var refs [2][]byte // the victims' states as if alone
	now := t0
	key := make([]byte, 0, 16)
	for ops := in[3:]; len(ops) >= 3; ops = ops[3:] {
		sel, arg, dt := ops[0], ops[1], ops[2]
		now += int64(dt) * int64(10*time.Millisecond)
		cost := 1 + int64(arg%2)
		if sel%4 != 0 { // a minted key: anything but a victim's name
			key = strconv.AppendUint(append(key[:0], 'm'), uint64(sel)<<8|uint64(arg&^1), 36)
			if sel%4 == 3 && arg&1 == 1 { // an admin reset of that key (Forget)
				_, err = l.Forget(tab, key)
			} else {
				_, err = l.Take(tab, key, now, 1)
			}
			require.NoError(t, err)
			continue
		}
		v := int(sel>>2) % 2
		if arg == 255 { // an admin reset of the victim: it starts afresh
			_, err = l.Forget(tab, []byte(victims[v]))
			require.NoError(t, err)
			refs[v] = nil
			continue
		}
		idle := limit.IdleAt(refs[v], now)
		out, err := l.Take(tab, []byte(victims[v]), now, cost)
		require.NoError(t, err)
		if !idle {
			require.Equal(t, Owned, out.Placement, "%s holds state that matters at %d: it must still own its slot", victims[v], now)
		}
		if out.Placement == Overflow {
			continue
		}
		next, want, err := limit.Decide(refs[v], now, cost, nil)
		require.NoError(t, err)
		require.Equal(t, want, out.Decisions[0], "%s (%s) is decided as if alone", victims[v], out.Placement)
		if want.Allowed {
			refs[v] = next
		}
	}
}

func (p Placement) String() string {
	return [...]string{"owned", "claimed", "evicted", "no room", "overflow"}[p]
}

// FuzzIsolation searches for a key stream under which a victim that owns its slot is decided otherwise
// than alone (make fuzz).
func FuzzIsolation(f *testing.F) {
	for _, seed := range isolationSeeds() {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, in []byte) { checkIsolation(t, in) })
}

// isolationSeeds are streams that fill small tables: a victim's burst, then minted keys, then the
// victim again, on every algorithm.
func isolationSeeds() [][]byte {
	var seeds [][]byte
	for kind := range byte(5) {
		s := []byte{1, kind, 4, 0, 0, 0, 0, 1, 0}
		for i := range byte(60) {
			s = append(s, 1+i%3*4+1, i, byte(i%2)) // minted keys, 10 ms apart every other request
			if i%7 == 0 {
				s = append(s, 3, i|1, 0) // and resets of some of them
			}
		}
		s = append(s, 0, 0, 0, 4, 0, 0, 0, 0, 50, 0, 1, 100)
		seeds = append(seeds, s, append(append([]byte(nil), s...), 0, 255, 0, 0, 0, 0, 0, 0, 0))
	}
	return seeds
}

func TestAVictimIsDecidedAsIfAloneWhateverStreamOfMintedKeysArrives(t *testing.T) {
	for _, seed := range isolationSeeds() {
		checkIsolation(t, seed)
	}
	streams := 200
	if testing.Short() {
		streams = 20
	}
	rng := rand.New(rand.NewPCG(1, 2)) // deterministic: the same streams on every run
	for range streams {
		in := make([]byte, 3+3*2000)
		for i := range in {
			in[i] = byte(rng.Uint32())
		}
		for i := 5; i < len(in); i += 3 {
			in[i] %= 8 // mostly small steps of the clock, so that keys stay active together
		}
		checkIsolation(t, in)
	}
}

func TestAVictimGetsExactlyItsCapacityWhileEightWorkersMintKeysAroundIt(t *testing.T) {
	const workers, perWorker, capacity = 8, 40, 100
	store := &yieldingStore{Store: newMemStore()}
	tab := newTable(t, 4, tokenBucket(capacity, time.Hour)) // 4 slots: the minted keys fill the rest at once
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		u, err := NewUpdater(store, "sentinel", 1000)
		require.NoError(t, err)
		l := NewLimiter(u)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perWorker { // a frozen clock: nothing refills, nobody goes idle
				out, err := l.Take(tab, []byte("victim"), t0, 1)
				if !assert.NoError(t, err) {
					return
				}
				if out.Allowed {
					admitted.Add(1)
				}
				_, err = l.Take(tab, []byte("minted-"+strconv.Itoa(w*perWorker+i)), t0, 1)
				assert.NoError(t, err)
			}
		}()
	}
	wg.Wait()
	assert.Equal(t, int64(capacity), admitted.Load(), "the victim's own bucket, untouched by 320 other keys")
}
