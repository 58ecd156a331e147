package e2e

import (
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/internal/envoyhost"
)

// Issue 20, finding 8: the copies a VM keeps to settle from response_json have a total bound
// (settle_memory, 32 MiB by default): slow readers past it settle without a copy, charged max.

func TestManySlowReadingSettlingStreamsNeverTakeTheVMsMemory(t *testing.T) {
	const streams = 100
	p := load(t, module(t, "meshlimit"), `{"rules": [{"name": "tokens", "key": [{"header": "x-user"}], "limits": [{"rate": "100000000/d"}],
		"cost": {"default": 10, "max": 8000, "max_body": 1048576, "settle": {"response_json": "usage.total_tokens"}}}]}`, 1)
	vm := p.VM(0)
	before := vm.MemoryBytes()
	chunk := []byte(`{"pad": "` + strings.Repeat("x", 1<<20-64) + `"`)
	var open []*envoyhost.Stream
	for i := range streams { // each answer is nearly max_body, and its reader never takes the end
		s, ok := postJSON(t, vm, "u"+strconv.Itoa(i), maxTokens(10)) // keys apart: each holds its share (1/16) of the VM's
		require.True(t, ok)
		_, err := s.SendResponseHeaders(envoyhost.Headers{{":status", "200"}, {"content-type", "application/json"}}, false)
		require.NoError(t, err)
		_, err = s.SendResponseBody(chunk, false)
		require.NoError(t, err)
		open = append(open, s)
	}
	grown := vm.MemoryBytes() - before
	refused := counter(p, "meshlimit.settle_copy_refused")
	for _, s := range open {
		require.NoError(t, s.Close())
	}
	assert.Equal(t, int64(streams-32), refused, "32 copies of just under 1 MiB fit the default 32 MiB")
	assert.Less(t, grown, uint64(80<<20), "the VM grew by %d MiB holding %d answers of 1 MiB", grown>>20, streams)
	assert.Zero(t, counter(p, "meshlimit.panics"))
	_, ok := postJSON(t, vm, "later", maxTokens(10))
	assert.True(t, ok, "the worker still serves")
	t.Logf("%d slow readers of 1 MiB answers: the VM grew by %d MiB, %d settled without a copy", streams, grown>>20, refused)
}
