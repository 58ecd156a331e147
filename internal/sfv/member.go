package sfv

import (
	"encoding/binary"
	"math/bits"
	"slices"
)

// AppendMember appends one member of a List whose value is an Integer, the shape of the members
// the quota fields write for every response (RateLimit's `"name";r=5;t=30;pk=:…:`): head, the
// member's key and the start of its first parameter already encoded by the caller (`, "name";r=`),
// then the Integer n, then, when param is not empty, the parameter param with the Integer m
// (`;t=30`), then tail, more parameters already encoded (`;pk=:…:`). n and m are clamped to
// ±MaxInteger and written as AppendInteger writes them. It checks dst's room once and writes the
// digits eight at a time (swarDigits), all in one function: it runs once per limit of every
// response, and a call costs more than a digit on wasm.
func AppendMember(dst, head []byte, n int64, param string, m int64, tail []byte) []byte {
	const integer = 16 // a sign and 15 digits
	start := len(dst)
	need := len(head) + 2*integer + 2 + len(param) + len(tail) + 8 // + 8: the digits are stored 8 bytes at a time
	dst = slices.Grow(dst, need)
	b := dst[start : start+need]
	i := copy(b, head)
	for v := n; ; v, param = m, "" {
		v = min(max(v, -MaxInteger), MaxInteger)
		u := uint64(v)
		if v < 0 {
			b[i], u = '-', uint64(-v)
			i++
		}
		switch {
		case u < 10:
			b[i] = byte('0' + u)
			i++
		case u < 1e8:
			k := digits8(u)
			binary.LittleEndian.PutUint64(b[i:], swarDigits(uint32(u))>>(8*(8-k)&63))
			i += k
		default: // at most 15 digits: up to 7, then 8
			hi := div1e8(u)
			k := digits8(hi)
			binary.LittleEndian.PutUint64(b[i:], swarDigits(uint32(hi))>>(8*(8-k)&63))
			binary.LittleEndian.PutUint64(b[i+k:], swarDigits(uint32(u-hi*1e8)))
			i += k + 8
		}
		if param == "" {
			break
		}
		b[i] = ';'
		if len(param) == 1 {
			b[i+1] = param[0]
			i += 2
		} else {
			i += 1 + copy(b[i+1:], param)
		}
		b[i] = '='
		i++
	}
	if len(tail) > 0 {
		i += copy(b[i:], tail)
	}
	return dst[:start+i]
}

// digits8 is the number of decimal digits of 1 <= u < 10^8.
func digits8(u uint64) int {
	t := bits.Len64(u) * 1233 >> 12 // log10(2) ≈ 1233/4096: the digits are t or t+1
	if u < pow10[t] {
		return t
	}
	return t + 1
}

// div1e8 returns u / 10^8 for u < 2^53, from a float64 division corrected by the exact remainder:
// Go divides a uint64 by a constant with a multiplication by its reciprocal's 128-bit product, a
// long software sequence on wasm; the float estimate is within 1 of the quotient.
func div1e8(u uint64) uint64 {
	q := uint64(float64(u) / 1e8)
	for q*1e8 > u {
		q--
	}
	for u-q*1e8 >= 1e8 {
		q++
	}
	return q
}

// swarDigits returns the 8 decimal digits of u < 10^8, leading zeros included, as ASCII bytes in
// a uint64 whose little-endian encoding is the text (the first digit in the low byte): the two
// halves of four digits split into pairs, then into digits, each step on every lane at once with
// a multiplication by a reciprocal that is exact on the lanes' range (x/100 = x×10486>>20 for
// x < 10^4, x/10 = x×103>>10 for x < 100). u is a uint32: its division by 10^4 is one
// multiplication, not the 64-bit sequence.
func swarDigits(u uint32) uint64 {
	hi := u / 10000
	v := uint64(hi) | uint64(u-hi*10000)<<32 // two 32-bit lanes of 4 digits: the first four in the low lane
	q := (v * 10486 >> 20) & 0x0000007f_0000007f
	v = q | (v-q*100)<<16 // four 16-bit lanes of 2 digits
	q = (v * 103 >> 10) & 0x000f_000f_000f_000f
	v = q | (v-q*10)<<8 // eight bytes of one digit
	return v + 0x30303030_30303030
}
