// Package siphash is SipHash-2-4 (Aumasson and Bernstein, "SipHash: a fast short-input PRF",
// 2012): a keyed 64-bit hash that, without the 128-bit key, can neither be computed nor inverted
// by trying inputs. meshlimit uses it wherever a client's key is hashed where the client could
// aim at the result: the slots and owner fingerprints of shared-data records (package
// sharedstate, keyed by a per-proxy secret) and the pk parameter of the RateLimit fields. It does
// not allocate.
package siphash

import (
	"encoding/binary"
	"math/bits"
)

// Sum64 returns SipHash-2-4, under the key (k0, k1), of the 8 little-endian bytes of prefix
// followed by msg.
func Sum64(k0, k1, prefix uint64, msg []byte) uint64 {
	s := newState(k0, k1)
	s.block(prefix)
	return s.finish(msg, 8+len(msg))
}

// SumBytes64 returns SipHash-2-4 of msg alone (no prefix), under the key (k0, k1).
func SumBytes64(k0, k1 uint64, msg []byte) uint64 {
	s := newState(k0, k1)
	return s.finish(msg, len(msg))
}

func newState(k0, k1 uint64) state {
	return state{k0 ^ 0x736f6d6570736575, k1 ^ 0x646f72616e646f6d, k0 ^ 0x6c7967656e657261, k1 ^ 0x7465646279746573}
}

// finish compresses the rest of the message, the last word carrying the total length n (mod 256),
// and finalizes.
func (s *state) finish(msg []byte, n int) uint64 {
	for len(msg) >= 8 {
		s.block(binary.LittleEndian.Uint64(msg))
		msg = msg[8:]
	}
	last := uint64(n&0xff) << 56
	for i, c := range msg {
		last |= uint64(c) << (8 * i)
	}
	s.block(last)
	s[2] ^= 0xff
	s.rounds(4)
	return s[0] ^ s[1] ^ s[2] ^ s[3]
}

type state [4]uint64

// block compresses one message word with two rounds.
func (s *state) block(m uint64) {
	s[3] ^= m
	s.rounds(2)
	s[0] ^= m
}

func (s *state) rounds(n int) {
	v0, v1, v2, v3 := s[0], s[1], s[2], s[3]
	for range n {
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
	}
	s[0], s[1], s[2], s[3] = v0, v1, v2, v3
}
