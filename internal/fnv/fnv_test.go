package fnv

import (
	"hash/fnv"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestStringAndBytesAgreeWithTheStandardLibrary(t *testing.T) {
	for _, s := range []string{"", "a", "meshlimit/default/api", "\xff\x00multi\nline"} {
		h := fnv.New64a()
		_, _ = h.Write([]byte(s))
		assert.Equal(t, h.Sum64(), String(s), "%q", s)
		assert.Equal(t, h.Sum64(), AddBytes(Offset64, []byte(s)), "%q", s)
	}
}

func TestHashingDoesNotAllocate(t *testing.T) {
	b := []byte("203.0.113.7")
	assert.Zero(t, testing.AllocsPerRun(100, func() { _ = AddBytes(String("x"), b) }))
}
