package algorithms

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// luaMulDivMod transcribes, operation for operation, the Lua 5.1 function in the package
// documentation, in float64 (Lua's number type), with Lua's a % b = a − floor(a/b)×b.
func luaMulDivMod(x, y, z float64) (float64, float64) {
	q, r := 0.0, 0.0
	for k := 6; k >= 0; k-- {
		d := luaMod(math.Floor(y/math.Pow(128, float64(k))), 128)
		t := r*128 + x*d
		qt := math.Floor(t / z)
		q, r = q*128+qt, t-qt*z
	}
	return q, r
}

func luaMod(a, b float64) float64 { return a - math.Floor(a/b)*b }

// TestMulDivModInDoubles shows that the Lua transcription computes exactly what Go computes,
// over the documented domain (x, y, z < 2^45, quotient < 2^45), including its edges.
func TestMulDivModInDoubles(t *testing.T) {
	const lim = int64(1) << 45
	r := rand.New(rand.NewPCG(4, 5))
	check := func(x, y, z int64) {
		t.Helper()
		want := new(big.Int).Mul(big.NewInt(x), big.NewInt(y))
		wq, wr := new(big.Int).QuoRem(want, big.NewInt(z), new(big.Int))
		if !wq.IsInt64() || wq.Int64() >= lim {
			return // outside the domain the package uses
		}
		q, rem := mulDivMod(x, y, z)
		require.Equal(t, wq.Int64(), q, "mulDivMod(%d, %d, %d)", x, y, z)
		require.Equal(t, wr.Int64(), rem, "mulDivMod(%d, %d, %d)", x, y, z)
		lq, lr := luaMulDivMod(float64(x), float64(y), float64(z))
		require.Equal(t, float64(q), lq, "lua muldivmod(%d, %d, %d)", x, y, z)
		require.Equal(t, float64(rem), lr, "lua muldivmod(%d, %d, %d)", x, y, z)
	}
	edges := []int64{0, 1, 2, 127, 128, 129, 999_999, 1_000_000, MaxQuota - 1, MaxQuota, maxWindowUs - 1, maxWindowUs, lim - 2, lim - 1}
	for _, x := range edges {
		for _, y := range edges {
			for _, z := range edges[1:] {
				check(x, y, z)
			}
		}
	}
	for range 50_000 {
		z := 1 + r.Int64N(lim-1)
		x, y := r.Int64N(lim), r.Int64N(lim)
		if r.IntN(2) == 0 {
			y = r.Int64N(z) // quotient < x, as in every call of the package
		}
		check(x, y, z)
	}
}

func TestQuantizeIsTheClampedQuotientOfNanosecondsByAThousand(t *testing.T) {
	want := func(now int64) int64 { return min(max(now/1000, 0), maxTimeUs) }
	r := rand.New(rand.NewPCG(22, 5))
	edges := []int64{math.MinInt64, -1, 0, 1, 999, 1000, 1001, 1 << 53, 1<<53 + 1, 1<<53 - 1,
		maxTimeUs * 1000, maxTimeUs*1000 + 999, (maxTimeUs + 1) * 1000, (maxTimeUs+1)*1000 - 1, math.MaxInt64 - 1, math.MaxInt64}
	for _, now := range edges {
		require.Equal(t, want(now), quantize(now), "%d", now)
	}
	for range 1_000_000 {
		now := int64(r.Uint64() >> uint(r.IntN(64)))
		now += []int64{0, -1, 1, -999, 500}[r.IntN(5)]
		if got := quantize(now); got != want(now) {
			require.Equal(t, want(now), got, "%d", now)
		}
	}
}
