package sha256

import (
	stdsha256 "crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestTheDigestIsFIPS180sForItsExamples(t *testing.T) {
	tests := []struct{ name, msg, digest string }{
		{"the empty message", "", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
		{"abc, one block", "abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
		{"the 448-bit message, two blocks", "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
		{"a million a", strings.Repeat("a", 1000000), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sum := Sum256([]byte(tc.msg))
			assert.Equal(t, tc.digest, hex.EncodeToString(sum[:]))
		})
	}
}

func TestEveryLengthAroundTheBlockBoundariesDigestsAsCryptoSHA256(t *testing.T) {
	b := make([]byte, 300)
	for i := range b {
		b[i] = byte(i*7 + 3)
	}
	for n := 0; n <= len(b); n++ {
		assert.Equal(t, stdsha256.Sum256(b[:n]), Sum256(b[:n]), "%d bytes", n)
	}
}

func FuzzSum256MatchesCryptoSHA256(f *testing.F) {
	f.Add([]byte("meshlimit-pk-v1\x000123456789abcdef"))
	f.Fuzz(func(t *testing.T, data []byte) {
		if Sum256(data) != stdsha256.Sum256(data) {
			t.Fatalf("digest of %x differs from crypto/sha256's", data)
		}
	})
}
