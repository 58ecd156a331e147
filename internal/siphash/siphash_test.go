package siphash

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/assert"
)

// The paper's key 00 01 … 0f, as two little-endian words.
const k0, k1 = 0x0706050403020100, 0x0f0e0d0c0b0a0908

func msg(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i)
	}
	return b
}

func TestSumBytes64MatchesThePublishedVectors(t *testing.T) {
	assert.Equal(t, uint64(0x726fdb47dd0e0e31), SumBytes64(k0, k1, nil), "the empty message")
	assert.Equal(t, uint64(0xa129ca6149be45e5), SumBytes64(k0, k1, msg(15)), "the paper's 15-byte example")
}

func TestSum64IsTheHashOfThePrefixBytesFollowedByTheMessage(t *testing.T) {
	for n := range 20 {
		m := msg(n)
		whole := binary.LittleEndian.AppendUint64(nil, 0x1122334455667788)
		assert.Equal(t, SumBytes64(k0, k1, append(whole, m...)), Sum64(k0, k1, 0x1122334455667788, m), "len %d", n)
	}
}

func TestSum64DependsOnTheKey(t *testing.T) {
	assert.NotEqual(t, Sum64(k0, k1, 0, []byte("203.0.113.9")), Sum64(k0+1, k1, 0, []byte("203.0.113.9")))
}

func TestSum64DoesNotAllocate(t *testing.T) {
	m := []byte("203.0.113.9")
	assert.Zero(t, testing.AllocsPerRun(100, func() { Sum64(k0, k1, 7, m) }))
}
