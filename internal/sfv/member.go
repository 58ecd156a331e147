package sfv

import (
	"encoding/binary"
	"math/bits"
	"slices"
)

// AppendMember appends one member of a List whose value is an Integer, the shape of the members
// the quota fields write for every response (RateLimit's `"name";r=5;t=30`): head, the member's
// key and the start of its first parameter already encoded by the caller (`, "name";r=`), then
// the Integer n, then, when param is not empty, the parameter param with the Integer m
// (`;t=30`). n and m are clamped to ±MaxInteger as AppendInteger clamps them, and each is written
// as AppendInteger writes it. It checks dst's room once and writes the digits eight at a time
// (swarDigits): it runs once per limit of every response.
func AppendMember(dst []byte, head []byte, n int64, param string, m int64) []byte {
	const integer = 16 // a sign and 15 digits
	start := len(dst)
	need := len(head) + integer + 2 + len(param) + integer + 8 // + 8: putDigits stores 8 bytes at a time
	dst = slices.Grow(dst, need)
	b := dst[start : start+need]
	i := copy(b, head)
	i += putInteger(b[i:], n)
	if param != "" {
		b[i] = ';'
		if len(param) == 1 {
			b[i+1] = param[0]
			i += 2
		} else {
			i += 1 + copy(b[i+1:], param)
		}
		b[i] = '='
		i += 1 + putInteger(b[i+1:], m)
	}
	return dst[:start+i]
}

// putInteger writes n, clamped to ±MaxInteger, at the start of b, which has room for its sign,
// its digits and 8 bytes more, and returns the number of bytes it takes.
func putInteger(b []byte, n int64) int {
	n = min(max(n, -MaxInteger), MaxInteger)
	if n >= 0 {
		return putDigits(b, uint64(n))
	}
	b[0] = '-'
	return 1 + putDigits(b[1:], uint64(-n))
}

// putDigits writes u (at most MaxInteger: 15 digits) in decimal at the start of b, which has room
// for its digits and 8 bytes more, and returns the number of digits. Up to 8 digits take one
// swarDigits and one 8-byte store; more take a division by 10^8 and two of each.
func putDigits(b []byte, u uint64) int {
	if u < 10 {
		b[0] = byte('0' + u)
		return 1
	}
	if u < 1e8 {
		k := digits8(u)
		binary.LittleEndian.PutUint64(b, swarDigits(u)>>(8*(8-k)))
		return k
	}
	hi, lo := u/1e8, u%1e8
	k := digits8(hi)
	binary.LittleEndian.PutUint64(b, swarDigits(hi)>>(8*(8-k)))
	binary.LittleEndian.PutUint64(b[k:], swarDigits(lo))
	return k + 8
}

// digits8 is the number of decimal digits of 1 <= u < 10^8.
func digits8(u uint64) int {
	t := bits.Len64(u) * 1233 >> 12 // log10(2) ≈ 1233/4096: the digits are t or t+1
	if u < pow10[t] {
		return t
	}
	return t + 1
}

// swarDigits returns the 8 decimal digits of u < 10^8, leading zeros included, as ASCII bytes in
// a uint64 whose little-endian encoding is the text (the first digit in the low byte): the two
// halves of four digits split into pairs, then into digits, each step on every lane at once with
// a multiplication by a reciprocal that is exact on the lanes' range (x/100 = x×10486>>20 for
// x < 10^4, x/10 = x×103>>10 for x < 100).
func swarDigits(u uint64) uint64 {
	hi := u / 10000
	v := hi | (u-hi*10000)<<32 // two 32-bit lanes of 4 digits: the first four in the low lane
	q := (v * 10486 >> 20) & 0x0000007f_0000007f
	v = q | (v-q*100)<<16 // four 16-bit lanes of 2 digits
	q = (v * 103 >> 10) & 0x000f_000f_000f_000f
	v = q | (v-q*10)<<8 // eight bytes of one digit
	return v + 0x30303030_30303030
}
