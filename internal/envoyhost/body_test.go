package envoyhost_test

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/internal/envoyhost"
)

func TestABufferingFilterIsCalledForEveryChunkWithTheWholeBufferedBody(t *testing.T) {
	p := newPlugin(t, "guest", envoyhost.Config{})
	s := p.VM(0).NewStream(envoyhost.StreamInfo{})
	defer s.Close()
	act, err := s.SendRequestHeaders(op("buffer"), false)
	require.NoError(t, err)
	require.Equal(t, envoyhost.ActionContinue, act)
	for i, chunk := range []string{"abc", "defg", "hi"} {
		act, err = s.SendRequestBody([]byte(chunk), i == 2)
		require.NoError(t, err)
		if i < 2 {
			assert.Equal(t, envoyhost.ActionPause, act, "chunk %d is held", i)
			assert.Empty(t, s.UpstreamBody(), "nothing passes while the filter buffers")
		}
	}
	assert.Equal(t, envoyhost.ActionContinue, act)
	m := p.Process().Metrics()
	assert.Equal(t, int64(3), m["body_calls"].Value, "one callback per chunk, even while buffering")
	assert.Equal(t, int64(3+7+9), m["body_bytes"].Value, "each callback's size is the whole buffered body")
	assert.Equal(t, int64(9), m["buffered_read"].Value, "the last callback reads the whole body")
	assert.Equal(t, []byte("abcdefghi"), s.UpstreamBody(), "the buffered body passes once, in order")
}

func TestABufferedRequestBodyPastTheLimitGets413(t *testing.T) {
	p := newPlugin(t, "guest", envoyhost.Config{BufferLimit: 10})
	s := p.VM(0).NewStream(envoyhost.StreamInfo{})
	defer s.Close()
	_, err := s.SendRequestHeaders(op("buffer"), false)
	require.NoError(t, err)
	act, err := s.SendRequestBody(bytes.Repeat([]byte("x"), 8), false)
	require.NoError(t, err)
	require.Equal(t, envoyhost.ActionPause, act)
	act, err = s.SendRequestBody(bytes.Repeat([]byte("x"), 8), false)
	require.NoError(t, err)
	assert.Equal(t, envoyhost.ActionStop, act)
	res := s.LocalReply()
	require.NotNil(t, res)
	assert.Equal(t, 413, res.Status)
	assert.Equal(t, "request_payload_too_large", res.Details)
	assert.Empty(t, s.UpstreamBody())
}

func TestANonBufferingFilterSeesEachChunkAsItComes(t *testing.T) {
	p := newPlugin(t, "guest", envoyhost.Config{BufferLimit: 4})
	s := p.VM(0).NewStream(envoyhost.StreamInfo{})
	defer s.Close()
	_, err := s.SendRequestHeaders(op(""), false)
	require.NoError(t, err)
	for i, chunk := range []string{"abcdef", "gh"} {
		act, err := s.SendRequestBody([]byte(chunk), i == 1)
		require.NoError(t, err)
		assert.Equal(t, envoyhost.ActionContinue, act, "the limit bounds buffers only")
	}
	assert.Equal(t, int64(8), p.Process().Metrics()["body_bytes"].Value)
	assert.Equal(t, []byte("abcdefgh"), s.UpstreamBody())
}
