package abi

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// decodeHeaderMap reads the host's header-map layout independently of AppendHeaderMap.
func decodeHeaderMap(t *testing.T, b []byte) [][2]string {
	t.Helper()
	require.GreaterOrEqual(t, len(b), 4)
	n := int(binary.LittleEndian.Uint32(b))
	sizes, data := b[4:4+8*n], b[4+8*n:]
	var out [][2]string
	for i := range n {
		k, v := int(binary.LittleEndian.Uint32(sizes[8*i:])), int(binary.LittleEndian.Uint32(sizes[8*i+4:]))
		require.Equal(t, byte(0), data[k], "a NUL after the name")
		require.Equal(t, byte(0), data[k+1+v], "a NUL after the value")
		out = append(out, [2]string{string(data[:k]), string(data[k+1 : k+1+v])})
		data = data[k+1+v+1:]
	}
	require.Empty(t, data, "nothing after the last pair")
	return out
}

func TestAHeaderMapIsSerializedAsTheHostReadsIt(t *testing.T) {
	for _, pairs := range [][][2]string{
		nil,
		{{"retry-after", "1"}},
		{{"ratelimit-policy", `"api";q=10;w=1`}, {"ratelimit", `"api";r=0;t=1`}, {"x-empty", ""}, {"content-type", "text/plain; charset=utf-8"}},
	} {
		got := decodeHeaderMap(t, AppendHeaderMap(nil, pairs))
		if len(pairs) == 0 {
			assert.Empty(t, got)
			continue
		}
		assert.Equal(t, pairs, got)
	}
}

func TestAHeaderMapIsAppendedAfterWhatTheBufferHolds(t *testing.T) {
	buf := AppendHeaderMap([]byte("junk"), [][2]string{{"a", "b"}})
	assert.Equal(t, "junk", string(buf[:4]))
	assert.Equal(t, [][2]string{{"a", "b"}}, decodeHeaderMap(t, buf[4:]))
}
