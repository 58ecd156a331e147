package sharedstate

import (
	"encoding/binary"
	"math/bits"
)

// sipHash24 is SipHash-2-4 (Aumasson and Bernstein, "SipHash: a fast short-input PRF", 2012) of msg
// under the 128-bit key (k0, k1). Records fingerprint keys with it under a secret that every VM of a
// proxy shares (see Updater): without the secret, nobody can choose a key value whose fingerprint, or
// whose candidate slots, equal another key's, as they could with an unkeyed hash such as FNV.
func sipHash24(k0, k1 uint64, msg []byte) uint64 {
	v0 := k0 ^ 0x736f6d6570736575
	v1 := k1 ^ 0x646f72616e646f6d
	v2 := k0 ^ 0x6c7967656e657261
	v3 := k1 ^ 0x7465646279746573
	n := len(msg)
	for ; len(msg) >= 8; msg = msg[8:] {
		m := binary.LittleEndian.Uint64(msg)
		v3 ^= m
		v0, v1, v2, v3 = sipRound(sipRound(v0, v1, v2, v3))
		v0 ^= m
	}
	last := uint64(n) << 56 // the length's low byte, then the bytes left over
	for i, c := range msg {
		last |= uint64(c) << (8 * i)
	}
	v3 ^= last
	v0, v1, v2, v3 = sipRound(sipRound(v0, v1, v2, v3))
	v0 ^= last
	v2 ^= 0xff
	v0, v1, v2, v3 = sipRound(sipRound(v0, v1, v2, v3))
	v0, v1, v2, v3 = sipRound(sipRound(v0, v1, v2, v3))
	return v0 ^ v1 ^ v2 ^ v3
}

func sipRound(v0, v1, v2, v3 uint64) (uint64, uint64, uint64, uint64) {
	v0 += v1
	v1 = bits.RotateLeft64(v1, 13) ^ v0
	v0 = bits.RotateLeft64(v0, 32)
	v2 += v3
	v3 = bits.RotateLeft64(v3, 16) ^ v2
	v0 += v3
	v3 = bits.RotateLeft64(v3, 21) ^ v0
	v2 += v1
	v1 = bits.RotateLeft64(v1, 17) ^ v2
	v2 = bits.RotateLeft64(v2, 32)
	return v0, v1, v2, v3
}
