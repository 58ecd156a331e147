package sfv

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// memberByAppends is AppendMember written with the package's other writers.
func memberByAppends(dst, head []byte, n int64, param string, m int64, tail []byte) []byte {
	dst = AppendInteger(append(dst, head...), n)
	if param != "" {
		dst = AppendInteger(append(append(append(dst, ';'), param...), '='), m)
	}
	return append(dst, tail...)
}

func TestAMemberIsWhatTheIntegerWriterWritesAfterItsHead(t *testing.T) {
	r := rand.New(rand.NewPCG(22, 4))
	edges := []int64{0, 1, 9, 10, 99, 100, 9999, 10000, 99_999_999, 100_000_000, 100_000_001, 999_999_999,
		1_000_000_000, MaxInteger - 1, MaxInteger, MaxInteger + 1, math.MaxInt64, -1, -9, -10, -100_000_000, -MaxInteger, math.MinInt64}
	for p := int64(1); p <= MaxInteger; p *= 10 { // every length, each side of every power of ten
		edges = append(edges, p-1, p, p+1, -p)
	}
	values := func() int64 {
		if r.IntN(3) == 0 {
			return edges[r.IntN(len(edges))]
		}
		v := int64(r.Uint64() >> uint(r.IntN(64)))
		if r.IntN(8) == 0 {
			v = -v
		}
		return v
	}
	heads := [][]byte{nil, []byte(`"per-ip";r=`), []byte(`, "a-much-longer-limit-name-than-usual";r=`)}
	for range 200_000 {
		head, n, m := heads[r.IntN(len(heads))], values(), values()
		param := []string{"", "t", "cost"}[r.IntN(3)]
		prefix := []byte("x, ")[:r.IntN(4)]
		tail := []byte(";pk=:AAECAwQFBgc=:")[:[]int{0, 0, 17}[r.IntN(3)]]
		want := memberByAppends(append([]byte(nil), prefix...), head, n, param, m, tail)
		got := AppendMember(append([]byte(nil), prefix...), head, n, param, m, tail)
		if string(got) != string(want) {
			require.Equal(t, string(want), string(got), "head %q n %d param %q m %d tail %q", head, n, param, m, tail)
		}
	}
}

func TestEveryNumberBelowTenThousandAndEveryDigitPositionIsWrittenAsTheIntegerWriterWritesIt(t *testing.T) {
	for n := int64(0); n < 10_000; n++ {
		for _, scale := range []int64{1, 10_000, 100_000_000, 10_000_000_000} {
			v := n * scale
			if got, want := string(AppendMember(nil, nil, v, "", 0, nil)), string(AppendInteger(nil, v)); got != want {
				require.Equal(t, want, got, "%d", v)
			}
		}
	}
}

func TestAMemberIsWrittenWithoutAllocatingWhenTheBufferHasRoom(t *testing.T) {
	buf := make([]byte, 0, 256)
	head := []byte(`, "per-ip";r=`)
	allocs := testing.AllocsPerRun(100, func() {
		buf = AppendMember(buf[:0], head, 999_999_999, "t", 1, nil)
		buf = AppendMember(buf, head, -MaxInteger, "cost", MaxInteger, []byte(";pk=:AA==:"))
	})
	assert.Zero(t, allocs)
	assert.Equal(t, `, "per-ip";r=999999999;t=1, "per-ip";r=-999999999999999;cost=999999999999999;pk=:AA==:`, string(buf))
}
