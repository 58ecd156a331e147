package messages

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestACloseFrameIsAnUnmaskedServerFrameAClientAccepts(t *testing.T) {
	frame, err := AppendClose([]byte("prefix"), CloseTryAgainLater, "slow down")
	require.NoError(t, err)
	assert.Equal(t, "prefix", string(frame[:6]), "appended")
	w := WebSocket{}
	n, err := w.Feed(frame[6:])
	require.NoError(t, err, "the server-to-client framer accepts it")
	assert.Zero(t, n)
	code, closed := w.Closed()
	assert.True(t, closed && w.Boundary())
	assert.Equal(t, CloseTryAgainLater, code)
	assert.Equal(t, "slow down", string(frame[10:]))
}

func TestACloseReasonIsCutAtACharacterWithinTheControlFrameLimit(t *testing.T) {
	reason := strings.Repeat("a", 122) + "é" // 124 bytes: "é" does not fit whole
	frame, err := AppendClose(nil, ClosePolicyViolation, reason)
	require.NoError(t, err)
	assert.Equal(t, byte(2+122), frame[1], "payload length")
	assert.Equal(t, strings.Repeat("a", 122), string(frame[4:]))
	frame, err = AppendClose(nil, ClosePolicyViolation, strings.Repeat("b", 500))
	require.NoError(t, err)
	assert.Len(t, frame, 2+2+MaxCloseReason)
}

func TestACloseFrameRefusesCodesThatOnlyReportAndReasonsThatAreNotUTF8(t *testing.T) {
	for _, code := range []uint16{0, 999, 1004, 1005, 1006, 1015, 2000, 5000} {
		dst, err := AppendClose([]byte("x"), code, "")
		assert.ErrorIs(t, err, ErrCloseCode, "code %d", code)
		assert.Equal(t, "x", string(dst), "dst unchanged")
	}
	for _, code := range []uint16{1000, 1008, 1013, 3000, 4999} {
		_, err := AppendClose(nil, code, "")
		assert.NoError(t, err, "code %d", code)
	}
	_, err := AppendClose(nil, ClosePolicyViolation, "\xff")
	assert.ErrorIs(t, err, ErrCloseReason)
}

func TestTheGRPCEndIsResourceExhaustedPassedExplicitly(t *testing.T) {
	end := ResourceExhausted("message rate limit exceeded")
	assert.Equal(t, GRPCEnd{HTTPStatus: 429, GRPCStatus: 8, Message: "message rate limit exceeded"}, end)
	assert.Equal(t, [][2]string{
		{":status", "200"}, {"content-type", "application/grpc"}, {"grpc-status", "8"},
		{"grpc-message", "100%25 used, r%C3%A9essayez%7E"},
	}, AppendTrailersOnly(nil, end.GRPCStatus, "100% used, réessayez~"))
	assert.Len(t, AppendTrailersOnly(nil, 8, ""), 3, "no grpc-message without a message")
}
