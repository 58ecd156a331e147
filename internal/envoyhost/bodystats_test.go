package envoyhost_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/internal/envoyhost"
)

func TestBodyStatsCountTheBufferAnswersAndTheBytesTheGuestCopiedOut(t *testing.T) {
	for _, tt := range []struct {
		name, op string
		want     envoyhost.BodyStats
	}{
		{"a buffering filter that reads the whole body at its end", "buffer", envoyhost.BodyStats{Buffered: 2, Copies: 1, CopiedBytes: 9, MaxCopy: 9}},
		{"a filter that reads no body", "", envoyhost.BodyStats{}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := newPlugin(t, "guest", envoyhost.Config{})
			s := p.VM(0).NewStream(envoyhost.StreamInfo{})
			defer s.Close()
			_, err := s.SendRequestHeaders(op(tt.op), false)
			require.NoError(t, err)
			for i, chunk := range []string{"abc", "defg", "hi"} {
				_, err = s.SendRequestBody([]byte(chunk), i == 2)
				require.NoError(t, err)
			}
			req, resp := s.BodyStats()
			assert.Equal(t, tt.want, req)
			assert.Equal(t, envoyhost.BodyStats{}, resp, "no response yet")
		})
	}
}
