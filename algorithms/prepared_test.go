package algorithms

import (
	"fmt"
	"math/bits"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// logUniform draws an integer in [lo, hi] whose logarithm is uniform: small and huge values alike.
func logUniform(r *rand.Rand, lo, hi int64) int64 {
	for {
		e := r.Float64() * float64(bitsLen(hi))
		v := int64(1) << int(e)
		v += r.Int64N(v)
		if v >= lo && v <= hi {
			return v
		}
	}
}

func bitsLen(v int64) int {
	n := 0
	for ; v > 0; v >>= 1 {
		n++
	}
	return n
}

// randomLimit draws a valid limit of any kind over the whole range Validate accepts: quotas and
// bursts from 1 to MaxQuota, windows from MinWindow to MaxWindow, calendar windows.
func randomLimit(r *rand.Rand) Limit {
	for {
		l := Limit{Kind: Kinds[r.IntN(len(Kinds))], Quota: logUniform(r, 1, MaxQuota)}
		l.Window = time.Duration(logUniform(r, int64(MinWindow/time.Microsecond), int64(MaxWindow/time.Microsecond))) * time.Microsecond
		switch {
		case l.Kind == SlidingLog:
			l.Quota = logUniform(r, 1, 64)
		case l.Kind.bucket() && r.IntN(2) == 0:
			l.Burst = logUniform(r, 1, MaxQuota)
		case l.Kind == FixedWindow && r.IntN(3) == 0:
			l.Window = 0
			l.Calendar = Calendar{Unit: CalendarUnit(1 + r.IntN(4)), Offset: time.Duration(r.IntN(2*18*60+1)-18*60) * time.Minute}
		}
		if l.Validate() == nil {
			return l
		}
	}
}

// errText makes errors comparable: the same message, or both nil.
func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// compareOnce runs one random operation on the Limit and on its Prepared form from the same state
// and fails unless both return the same bytes, decision and error. It returns the reference's
// next state (state itself when the operation writes none).
func compareOnce(t *testing.T, r *rand.Rand, l Limit, p *Prepared, state []byte, now int64) []byte {
	t.Helper()
	c := l.Capacity()
	cost := []int64{1, 1, 1 + r.Int64N(min(c, 1<<20)), c, c + 1, 0, logUniform(r, 1, 2*MaxQuota)}[r.IntN(7)]
	at := now - r.Int64N(int64(2*span(l))+1)
	what := fmt.Sprintf("%+v state %x now %d cost %d at %d", l, state, now, cost, at)
	switch r.IntN(5) {
	case 0, 1:
		want, wd, werr := l.Decide(state, now, cost, nil)
		got, gd, gerr := p.Decide(state, now, cost, nil)
		require.Equal(t, errText(werr), errText(gerr), "Decide %s", what)
		require.Equal(t, wd, gd, "Decide %s", what)
		require.Equal(t, want, got, "Decide %s", what)
		if werr == nil {
			requireStateSize(t, p, got, "Decide "+what)
			return want
		}
	case 2:
		wd, werr := l.Peek(state, now)
		gd, gerr := p.Peek(state, now)
		require.Equal(t, errText(werr), errText(gerr), "Peek %s", what)
		require.Equal(t, wd, gd, "Peek %s", what)
	case 3:
		want, werr := l.Undo(state, now, at, cost, nil)
		got, gerr := p.Undo(state, now, at, cost, nil)
		require.Equal(t, errText(werr), errText(gerr), "Undo %s", what)
		require.Equal(t, want, got, "Undo %s", what)
		if werr == nil {
			requireStateSize(t, p, got, "Undo "+what)
			return want
		}
	default:
		delta := cost
		if r.IntN(2) == 0 {
			delta = -cost
		}
		want, werr := l.Adjust(state, now, at, delta, nil)
		got, gerr := p.Adjust(state, now, at, delta, nil)
		require.Equal(t, errText(werr), errText(gerr), "Adjust %s", what)
		require.Equal(t, want, got, "Adjust %s", what)
		if werr == nil {
			requireStateSize(t, p, got, "Adjust "+what)
			return want
		}
	}
	require.Equal(t, l.IdleAt(state, now), p.IdleAt(state, now), "IdleAt %s", what)
	return state
}

// requireStateSize fails unless a state p wrote is empty or has p.StateSize bytes (when that is
// fixed).
func requireStateSize(t *testing.T, p *Prepared, state []byte, what string) {
	t.Helper()
	if n := p.StateSize(); n > 0 && len(state) > 0 {
		require.Len(t, state, n, "StateSize: %s", what)
	}
}

func TestEveryKindButTheSlidingLogWritesStatesOfOneSize(t *testing.T) {
	tests := []struct {
		name string
		l    Limit
		size int
	}{
		{"a token bucket: 17 bytes", Limit{Kind: TokenBucket, Quota: 5, Window: time.Second}, 17},
		{"a leaky bucket: 17 bytes", Limit{Kind: LeakyBucket, Quota: 5, Window: time.Second}, 17},
		{"a fixed window: 17 bytes", Limit{Kind: FixedWindow, Quota: 5, Window: time.Second}, 17},
		{"a calendar window: 17 bytes", Limit{Kind: FixedWindow, Quota: 5, Calendar: Calendar{Unit: CalendarMonth}}, 17},
		{"a sliding window: 25 bytes", Limit{Kind: SlidingWindow, Quota: 5, Window: time.Second}, 25},
		{"a sliding log: no fixed size", Limit{Kind: SlidingLog, Quota: 5, Window: time.Second}, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := tc.l.Prepare()
			require.NoError(t, err)
			assert.Equal(t, tc.size, p.StateSize())
			next, _, err := p.Decide(nil, base, 1, nil)
			require.NoError(t, err)
			if tc.size > 0 {
				assert.Len(t, next, tc.size, "a fresh state's first write")
			}
		})
	}
	assert.Zero(t, (&Prepared{}).StateSize(), "a zero Prepared")
}

// TestADecisionWrittenOverItsOwnStateIsTheDecisionWrittenElsewhere: for every kind of a fixed
// state size, deciding into the state's own bytes (what a record edited in place does) gives the
// bytes and decision of deciding into another buffer, over random limits, clocks and costs.
func TestADecisionWrittenOverItsOwnStateIsTheDecisionWrittenElsewhere(t *testing.T) {
	r := rand.New(rand.NewPCG(22, 2))
	for range 2000 {
		l := randomLimit(r)
		p, err := l.Prepare()
		require.NoError(t, err)
		if p.StateSize() == 0 {
			continue
		}
		now := base + r.Int64N(int64(MaxWindow))
		state, _, err := p.Decide(nil, now, 1, nil)
		require.NoError(t, err)
		for range 20 {
			now += r.Int64N(int64(span(l))/max(l.Quota, 1)*4 + 1000)
			cost := 1 + r.Int64N(min(l.Capacity(), 4))
			want, wd, werr := p.Decide(state, now, cost, nil)
			own := append([]byte(nil), state...)
			got, gd, gerr := p.Decide(own, now, cost, own[:0])
			require.Equal(t, errText(werr), errText(gerr))
			require.Equal(t, wd, gd, "%+v", l)
			require.Equal(t, want, got, "%+v", l)
			require.Equal(t, want, own, "written where the state was")
			state = want
		}
	}
}

// TestAPreparedLimitDecidesExactlyAsItsLimitOverRandomInputs is the proof that Prepare changes no
// result: random limits over the whole valid range, each through a random sequence of decisions,
// peeks, undos and settles (clocks that step forward, stand still, jump idle windows or step back;
// costs from 1 to past twice the capacity; now and then a garbage state), must give the same bytes,
// decisions and errors through the Limit and through its Prepared form.
func TestAPreparedLimitDecidesExactlyAsItsLimitOverRandomInputs(t *testing.T) {
	r := rand.New(rand.NewPCG(22, 1))
	wide := 0 // buckets whose products do not fit in 64 bits
	const limits = 3000
	for range limits {
		l := randomLimit(r)
		p, err := l.Prepare()
		require.NoError(t, err)
		if hi, _ := bits.Mul64(uint64(p.g.tau.i+1), uint64(l.Quota)); l.Kind.bucket() && hi > 0 {
			wide++
		}
		var state []byte
		now := base + r.Int64N(int64(MaxWindow))
		for range 40 {
			now = nextNow(r, l, now, 8)
			if r.IntN(50) == 0 {
				state = garbage(r, state)
			}
			state = compareOnce(t, r, l, &p, state, now)
		}
	}
	assert.Greater(t, wide, limits/50, "the random limits include buckets whose products need more than 64 bits")
}

// nextNow returns a next time after now for a trace of random operations on l: one in ways of
// them steps the clock back, one stays at the same instant, one skips idle windows, and the others
// follow about the rate.
func nextNow(r *rand.Rand, l Limit, now int64, ways int) int64 {
	w := int64(span(l))
	switch r.IntN(ways) {
	case 0:
		return now - r.Int64N(w/4+1) // the clock steps back
	case 1:
		return now // the same instant
	case 2:
		return now + r.Int64N(16*w+1) // idle windows
	}
	return now + r.Int64N(w/max(l.Quota, 1)*4+1000) // about the rate
}

// garbage returns state with a random byte changed, truncated, or random bytes of a state's size.
func garbage(r *rand.Rand, state []byte) []byte {
	b := append([]byte(nil), state...)
	switch {
	case len(b) > 0 && r.IntN(2) == 0:
		b[r.IntN(len(b))] = byte(r.Uint32())
	case len(b) > 1 && r.IntN(2) == 0:
		b = b[:r.IntN(len(b))]
	default:
		b = make([]byte, 17)
		for i := range b {
			b[i] = byte(r.Uint32())
		}
	}
	return b
}

// TestMulAddDivDividesAsMulDivModDoes checks the 64-bit division against the 128-bit one over the
// range the buckets use, edges included: x, z, d up to MaxWindow in µs, y up to MaxQuota.
func TestMulAddDivDividesAsMulDivModDoes(t *testing.T) {
	r := rand.New(rand.NewPCG(22, 2))
	edge := func(hi int64) int64 {
		switch r.IntN(4) {
		case 0:
			return hi
		case 1:
			return 1 + r.Int64N(3)
		}
		return logUniform(r, 1, hi)
	}
	for range 200_000 {
		x, y, d := edge(maxWindowUs), edge(MaxQuota), edge(maxWindowUs)
		z := r.Int64N(d)
		if hi, lo := bits.Mul64(uint64(x), uint64(y)); hi >= uint64(d)>>10 || lo > lo+uint64(z) {
			continue // a quotient of 2^54 or more: outside what the buckets divide
		}
		wq, wr := mulDivMod(x, y, d)
		wq, wr = wq+(wr+z)/d, (wr+z)%d
		q, rem := mulAddDiv(x, y, z, d)
		require.Equal(t, [2]int64{wq, wr}, [2]int64{q, rem}, "(%d×%d+%d)/%d", x, y, z, d)
	}
}

// FuzzPreparedMatchesLimit is the random test's property on fuzzer-chosen limits and traces.
func FuzzPreparedMatchesLimit(f *testing.F) {
	f.Add(uint8(0), uint16(3), uint32(999_000), uint16(0), uint64(1), []byte{1, 0, 0, 1, 0, 0, 2, 9, 201})
	f.Add(uint8(1), uint16(999), uint32(7), uint16(1999), uint64(2), []byte{0, 64, 255, 3, 200, 0})
	f.Add(uint8(12), uint16(100), uint32(0), uint16(0), uint64(3), []byte{2, 17, 0, 0, 1, 1})
	f.Fuzz(func(t *testing.T, kind uint8, quota uint16, windowUs uint32, burst uint16, seed uint64, ops []byte) {
		l, ok := fuzzLimit(kind, quota, windowUs, burst)
		if !ok {
			t.Skip()
		}
		p, err := l.Prepare()
		require.NoError(t, err)
		r := rand.New(rand.NewPCG(seed, 22))
		var state []byte
		now := base
		for _, q := range fuzzTrace(l, ops) {
			now += int64(q.dt)
			state = compareOnce(t, r, l, &p, state, now)
		}
	})
}

func TestPrepareReportsWhatValidateReports(t *testing.T) {
	bad := Limit{Kind: TokenBucket, Quota: 10, Window: time.Second, Burst: -1}
	_, err := bad.Prepare()
	require.Error(t, err)
	assert.Equal(t, bad.Validate().Error(), err.Error())
}

func TestAZeroPreparedLimitDecidesNothing(t *testing.T) {
	var p Prepared
	_, _, err := p.Decide(nil, base, 1, nil)
	assert.ErrorIs(t, err, errUnprepared)
	_, err = p.Peek(nil, base)
	assert.ErrorIs(t, err, errUnprepared)
	_, err = p.Undo([]byte{1}, base, base, 1, nil)
	assert.ErrorIs(t, err, errUnprepared)
	_, err = p.Adjust(nil, base, base, 1, nil)
	assert.ErrorIs(t, err, errUnprepared)
	assert.False(t, p.IdleAt(nil, base), "as an invalid Limit's")
}

// BenchmarkPreparedDecide is BenchmarkDecide on the prepared limits, and on the e2e instruction
// bench's token bucket (a billion per second).
func BenchmarkPreparedDecide(b *testing.B) {
	for _, l := range append(benchLimits(), Limit{Kind: TokenBucket, Quota: 1_000_000_000, Window: time.Second}) {
		name := benchName(l)
		if l.Quota == 1_000_000_000 {
			name += "_1e9_per_s"
		}
		b.Run(name, func(b *testing.B) {
			p, err := l.Prepare()
			require.NoError(b, err)
			state := make([]byte, 0, l.EncodedSize())
			step := int64(span(l)) / l.Quota / 2
			now := base
			b.ReportAllocs()
			for b.Loop() {
				now += step
				state, _, _ = p.Decide(state, now, 1, state)
			}
		})
	}
}
