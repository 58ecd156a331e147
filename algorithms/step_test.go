package algorithms

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// compareInPlace decides cost at now on state (StateSize bytes, or empty) with DecideInPlace, on a
// copy of the state that lies between guard bytes in a larger buffer, and with the reference
// Limit.Decide, and fails unless both give the same bytes, decision and error, and the in-place
// decision wrote nothing outside its state (nor anything at all when it failed). It returns the
// reference's next state (state itself when it failed).
func compareInPlace(t *testing.T, l Limit, p *Prepared, state []byte, now, cost int64) []byte {
	t.Helper()
	what := fmt.Sprintf("%+v state %x now %d cost %d", l, state, now, cost)
	want, wd, werr := l.Decide(state, now, cost, nil)
	if len(state) == 0 { // a fresh state in place is Decide's nil; start from what it wrote
		if werr != nil {
			return state
		}
		state = want
		want, wd, werr = l.Decide(state, now, cost, nil)
	}
	buf := bytes.Repeat([]byte{0xa5}, len(state)+16)
	at := buf[8 : 8+len(state) : 8+len(state)]
	copy(at, state)
	d := Decision{Allowed: true, Remaining: -7} // overwritten, or zeroed on an error
	gerr := p.DecideInPlace(at, now, cost, &d)
	require.Equal(t, errText(werr), errText(gerr), "DecideInPlace %s", what)
	require.Equal(t, wd, d, "DecideInPlace %s", what)
	require.Equal(t, bytes.Repeat([]byte{0xa5}, 8), buf[:8], "the bytes before the state %s", what)
	require.Equal(t, bytes.Repeat([]byte{0xa5}, 8), buf[8+len(state):], "the bytes after the state %s", what)
	if werr != nil {
		require.Equal(t, state, at, "a refused state is left as it was: %s", what)
		return state
	}
	require.Equal(t, want, at, "DecideInPlace %s", what)
	return want
}

func TestAStepPutWhereTheStateLiesDecidesExactlyAsTheLimit(t *testing.T) {
	r := rand.New(rand.NewPCG(22, 3))
	kinds := map[Kind]int{}
	for range 3000 {
		l := randomLimit(r)
		if l.Kind == SlidingLog {
			continue // no fixed size: never decided in place
		}
		kinds[l.Kind]++
		p, err := l.Prepare()
		require.NoError(t, err)
		var state []byte
		now := base + r.Int64N(int64(MaxWindow))
		c := l.Capacity()
		for range 30 {
			now = nextNow(r, l, now, 6)
			if r.IntN(20) == 0 && len(state) > 0 {
				// A state of the right size that may not decode.
				state = append(garbage(r, state), make([]byte, p.StateSize())...)[:p.StateSize()]
			}
			cost := []int64{1, 1, 1, 1 + r.Int64N(min(c, 1<<20)), c, c + 1, 0, logUniform(r, 1, 2*MaxQuota)}[r.IntN(8)]
			state = compareInPlace(t, l, &p, state, now, cost)
		}
	}
	for _, k := range []Kind{TokenBucket, LeakyBucket, FixedWindow, SlidingWindow} {
		assert.Greater(t, kinds[k], 300, "%v limits drawn", k)
	}
}

func TestAStateOfAnotherSizeOrWithoutAFixedSizeIsNotDecidedInPlace(t *testing.T) {
	tb, err := Limit{Kind: TokenBucket, Quota: 10, Window: time.Second}.Prepare()
	require.NoError(t, err)
	log, err := Limit{Kind: SlidingLog, Quota: 10, Window: time.Second}.Prepare()
	require.NoError(t, err)
	state, _, err := tb.Decide(nil, base, 1, nil)
	require.NoError(t, err)
	for _, c := range []struct {
		p     *Prepared
		state []byte
		want  string
	}{
		{&tb, append(append([]byte(nil), state...), 0), "has 18 bytes, want 17"},
		{&tb, state[:16], "has 16 bytes, want 17"},
		{&tb, nil, "has 0 bytes, want 17"},
		{&log, make([]byte, 17), "no fixed size"},
		{&Prepared{}, make([]byte, 17), errUnprepared.Error()},
	} {
		before := append([]byte(nil), c.state...)
		d := Decision{Allowed: true}
		err := c.p.DecideInPlace(c.state, base, 1, &d)
		require.Error(t, err)
		assert.Contains(t, err.Error(), c.want)
		assert.Equal(t, Decision{}, d)
		assert.Equal(t, before, c.state, "nothing written")
	}
}

// FuzzStepMatchesDecide is the in-place decision's property on fuzzer-chosen limits, states of the
// limit's size (valid or not), times and costs: it decides as Limit.Decide does.
func FuzzStepMatchesDecide(f *testing.F) {
	for k := range uint8(5) {
		l, _ := fuzzLimit(k, 3, 999_000, 0)
		state, _, _ := l.Decide(nil, base, 1, nil)
		f.Add(k, uint16(3), uint32(999_000), uint16(0), state, int64(0), uint64(1))
		f.Add(k, uint16(999), uint32(7), uint16(1999), state, int64(1_000_000), uint64(2000))
	}
	f.Add(uint8(12), uint16(100), uint32(0), uint16(0), []byte{header(FixedWindow), 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 200}, int64(-5), uint64(7))
	f.Fuzz(func(t *testing.T, kind uint8, quota uint16, windowUs uint32, burst uint16, state []byte, dt int64, cost uint64) {
		l, ok := fuzzLimit(kind, quota, windowUs, burst)
		if !ok || l.Kind == SlidingLog {
			t.Skip()
		}
		p, err := l.Prepare()
		require.NoError(t, err)
		n := p.StateSize()
		state = append(state, make([]byte, n)...)[:n]
		now := base + dt%int64(100*span(l))
		c := int64(cost % uint64(2*l.Capacity()+3))
		next := compareInPlace(t, l, &p, state, now, c)
		compareInPlace(t, l, &p, next, now+int64(span(l))/3, 1)
	})
}

func TestDecidingEveryLimitOfARecordInOneCallIsDecidingEachWhereItLies(t *testing.T) {
	r := rand.New(rand.NewPCG(22, 7))
	for range 500 {
		var limits []Prepared
		var offs []uint16
		size := 1
		for range 1 + r.IntN(8) {
			l := randomLimit(r)
			if l.Kind == SlidingLog {
				continue
			}
			p, err := l.Prepare()
			require.NoError(t, err)
			limits, offs = append(limits, p), append(offs, uint16(size+1))
			size += 1 + p.StateSize()
		}
		record := make([]byte, size)
		now := base + r.Int64N(int64(MaxWindow))
		for range 20 {
			now += r.Int64N(int64(time.Hour))
			cost := 1 + r.Int64N(3)
			if r.IntN(10) == 0 && len(limits) > 0 { // a state that does not decode somewhere
				record[int(offs[r.IntN(len(offs))])] ^= 0xff
			}
			want, each := append([]byte(nil), record...), make([]Decision, len(limits))
			wantFailed, wantAllowed, wantErr := len(limits), true, error(nil)
			for i := range limits {
				o := int(offs[i])
				if err := limits[i].DecideInPlace(want[o:o+limits[i].StateSize()], now, cost, &each[i]); err != nil {
					wantFailed, wantErr = i, err
					break
				}
				wantAllowed = wantAllowed && each[i].Allowed
			}
			got := make([]Decision, len(limits))
			failed, allowed, err := DecideEachInPlace(limits, record, offs, now, cost, got)
			require.Equal(t, errText(wantErr), errText(err))
			require.Equal(t, wantFailed, failed)
			require.Equal(t, wantAllowed, allowed)
			require.Equal(t, each, got)
			require.Equal(t, want, record)
			if err != nil {
				record = make([]byte, size) // start again from fresh states
			}
		}
	}
}

func TestAStateBeyondItsRecordIsNotDecided(t *testing.T) {
	p, err := Limit{Kind: TokenBucket, Quota: 10, Window: time.Second}.Prepare()
	require.NoError(t, err)
	record := make([]byte, 30)
	_, _, err = p.Decide(nil, base, 1, record[1:1])
	require.NoError(t, err)
	ds := []Decision{{}, {Allowed: true}}
	failed, allowed, err := DecideEachInPlace([]Prepared{p, p}, record, []uint16{1, 19}, base, 1, ds)
	require.Error(t, err)
	assert.Equal(t, 1, failed)
	assert.True(t, allowed, "the limit before it admitted")
	assert.Equal(t, Decision{}, ds[1])
	assert.True(t, ds[0].Allowed, "the limit before it is decided")
}
