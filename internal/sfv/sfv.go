// Package sfv is meshlimit's one implementation of RFC 9651 Structured Field Values: the encoder
// of the bare items the quota fields carry (RateLimit-Policy, RateLimit and X-RateLimit-Limit,
// written by the filter through package rules and by the RLS front, service/rls), and a strict
// parser of Lists, which the tests of both use to check that what they write is what a
// conforming client reads.
//
// The encoder appends to a caller-owned buffer and never allocates when it has room: the filter
// renders the quota fields of every response with it. The parser (ParseList, ParsePolicies)
// allocates and is for tests. The package imports only the standard library.
package sfv

import (
	"encoding/base64"
	"math/bits"
	"slices"
)

// MaxInteger is the largest magnitude of an RFC 9651 Integer (15 digits).
const MaxInteger = 999_999_999_999_999

// AppendString appends s as an sf-string: quoted, with '"' and '\' escaped. A byte an sf-string
// cannot hold (outside printable ASCII) is written as '?', so the output is always a valid
// sf-string.
func AppendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			dst = append(dst, '\\', c)
		case c < 0x20 || c > 0x7e:
			dst = append(dst, '?')
		default:
			dst = append(dst, c)
		}
	}
	return append(dst, '"')
}

// AppendInteger appends n as an sf-integer, clamped to ±MaxInteger so that the output is always
// a valid one.
func AppendInteger(dst []byte, n int64) []byte {
	return appendDecimal(dst, min(max(n, -MaxInteger), MaxInteger))
}

// AppendByteSequence appends b as an sf-binary: base64 between colons.
func AppendByteSequence(dst []byte, b []byte) []byte {
	dst = append(dst, ':')
	dst = base64.StdEncoding.AppendEncode(dst, b)
	return append(dst, ':')
}

// digitPairs holds "00" to "99": appendDecimal writes two digits per division.
const digitPairs = "00010203040506070809101112131415161718192021222324252627282930313233343536373839" +
	"40414243444546474849505152535455565758596061626364656667686970717273747576777879" +
	"8081828384858687888990919293949596979899"

// pow10 holds 10^0 to 10^19, for appendDecimal's count of digits.
var pow10 = [20]uint64{1, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19}

// appendDecimal appends n in decimal, as strconv.AppendInt(dst, n, 10) does, two digits per
// division from a digit table, with no call into strconv on the path of a response's quota fields.
// It counts the digits first (from the bit length) and writes them in place, from the last: no
// copy, which is a call on wasm.
func appendDecimal(dst []byte, n int64) []byte {
	u := uint64(n)
	if n < 0 {
		dst = append(dst, '-')
		u = -u
	}
	if u < 10 {
		return append(dst, byte('0'+u))
	}
	t := bits.Len64(u) * 1233 >> 12 // log10(2) ≈ 1233/4096: the digits are t or t+1
	k := t + 1
	if u < pow10[t] {
		k = t
	}
	start := len(dst)
	dst = slices.Grow(dst, k)[:start+k]
	b := dst[start:]
	i := len(b)
	for u >= 100 {
		q := u / 100
		j := (u - q*100) * 2
		i -= 2
		b[i], b[i+1] = digitPairs[j], digitPairs[j+1]
		u = q
	}
	if u >= 10 {
		b[1], b[0] = digitPairs[u*2+1], digitPairs[u*2]
	} else {
		b[0] = byte('0' + u)
	}
	return dst
}
