package algorithms

import "math/bits"

// All arithmetic in this package is on int64 values that stay within ±2^53, so that a Lua 5.1
// script, whose numbers are IEEE doubles, computes exactly the same results (see the package
// documentation for the bounds and how each one is guaranteed).

const (
	// nsPerUs converts between the unix nanoseconds of the API and the microseconds of the state.
	nsPerUs = 1000

	// maxTimeUs is the latest instant the algorithms can represent, 2^52 µs after the unix epoch
	// (in the year 2112). Later times are clamped to it.
	maxTimeUs = 1 << 52

	// maxWindowUs is MaxWindow in microseconds (3.456e13 < 2^45).
	maxWindowUs = int64(MaxWindow / 1000)
)

// quantize converts unix nanoseconds to microseconds, clamped to [0, maxTimeUs].
func quantize(now int64) int64 {
	if now <= 0 {
		return 0
	}
	if now >= (maxTimeUs+1)*nsPerUs {
		return maxTimeUs
	}
	// now / nsPerUs from a float64 division corrected by the exact remainder (the estimate is within
	// 2 of the quotient): Go divides an int64 by a constant with a 128-bit product by its
	// reciprocal, a long software sequence on wasm, and this runs once per limit of every request.
	us := int64(float64(now) / nsPerUs)
	for us*nsPerUs > now {
		us--
	}
	for now-us*nsPerUs >= nsPerUs {
		us++
	}
	return us
}

// mulDivMod returns floor(x*y/z) and (x*y) mod z.
//
// mulDivMod requires 0 <= x, y, 1 <= z, and a quotient below 2^63. Every caller in this
// package also keeps x, y, z < 2^45 and the quotient < 2^53, which is what the Lua
// transcription (long multiplication in base 128, see doc.go) needs to stay exact in doubles.
func mulDivMod(x, y, z int64) (q, r int64) {
	hi, lo := bits.Mul64(uint64(x), uint64(y))
	if hi >= uint64(z) {
		// Unreachable for validated limits and decoded states; saturate instead of panicking.
		return 1<<63 - 1, 0
	}
	uq, ur := bits.Div64(hi, lo, uint64(z))
	return int64(uq), int64(ur)
}

// mulAddDiv returns floor((x*y+z)/d) and (x*y+z) mod d in 64-bit arithmetic, for a product that
// may not fit in 64 bits: a float64 estimate of the quotient, corrected by the remainder, which is
// exact modulo 2^64.
//
// It requires 0 <= x, y, z < 2^53, 1 <= d < 2^53 and a quotient below 2^50: the estimate is then
// off by at most 1 (three roundings of relative error 2^-53 each, and the truncation), so the true
// remainder is within (-2d, 2d) and its value modulo 2^64 is the value itself. Every caller in this
// package has x, z, d < 2^46, y <= MaxQuota and a quotient at most Capacity + 1.
func mulAddDiv(x, y, z, d int64) (q, r int64) {
	q = int64((float64(x)*float64(y) + float64(z)) / float64(d))
	r = int64(uint64(x)*uint64(y) + uint64(z) - uint64(q)*uint64(d))
	for r < 0 {
		q, r = q-1, r+d
	}
	for r >= d {
		q, r = q+1, r-d
	}
	return q, r
}

// usToDuration converts a non-negative microsecond count (< 2^53) to a time.Duration in ns.
func usToDuration(us int64) int64 { return us * nsPerUs }
