package messages

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// First bytes of frames: FIN plus opcode, or the opcode alone for a frame that is not the last.
const (
	fText, fBinary, fCont, fClose, fPing, fPong = 0x81, 0x82, 0x80, 0x88, 0x89, 0x8A
	fTextMore, fBinaryMore, fContMore           = 0x01, 0x02, 0x00
	rsv1                                        = 0x40
)

var key = []byte{0x37, 0xfa, 0x21, 0x3d}

func TestWebSocketFraming(t *testing.T) {
	long := string(make([]byte, 300))
	closeTooLong := []byte{fClose, 126, 0, 200}
	tests := []struct {
		name string
		cfg  WebSocket
		data []byte
		want parse
	}{
		{name: "an empty session has no messages", want: parse{boundary: true}},
		{
			name: "an unfragmented text message counts once",
			data: wsFrame(fText, nil, "hi"), want: parse{starts: []uint64{0}, offset: 4, boundary: true, frames: 1},
		},
		{
			name: "a fragmented message counts once, at its first frame",
			data: cat(wsFrame(fTextMore, nil, "a"), wsFrame(fContMore, nil, "b"), wsFrame(fCont, nil, "c"), wsFrame(fBinary, nil, "d")),
			want: parse{starts: []uint64{0, 9}, offset: 12, boundary: true, frames: 4},
		},
		{
			name: "a ping between the fragments of a message is parsed and not counted",
			data: cat(wsFrame(fBinaryMore, nil, "a"), wsFrame(fPing, nil, "p"), wsFrame(fCont, nil, "b")),
			want: parse{starts: []uint64{0}, offset: 9, boundary: true, frames: 2, controls: 1},
		},
		{
			name: "pings, pongs and the close do not count",
			data: cat(wsFrame(fPing, nil, ""), wsFrame(fPong, nil, "x"), wsFrame(fClose, nil, "\x03\xe8bye")),
			want: parse{offset: 12, boundary: true, controls: 3, closed: true, closeCode: 1000},
		},
		{
			name: "masked client frames count and the close code is read through the mask",
			cfg:  WebSocket{FromClient: true},
			data: cat(wsFrame(fText, key, "hello"), wsFrame(fClose, key, "\x03\xf0")),
			want: parse{starts: []uint64{0}, offset: 19, boundary: true, frames: 1, controls: 1, closed: true, closeCode: 1008},
		},
		{
			name: "16- and 64-bit lengths are skipped",
			data: cat(wsFrame(fBinary, nil, long), []byte{fText, 127, 0, 0, 0, 0, 0, 0, 0, 1, 'x'}, wsFrame(fText, nil, "y")),
			want: parse{starts: []uint64{0, 304, 315}, offset: 318, boundary: true, frames: 3},
		},
		{
			name: "a message counts at its first byte, before its header is whole",
			data: []byte{fText}, want: parse{starts: []uint64{0}, offset: 1, frames: 1},
		},
		{
			name: "a client frame that is not masked is malformed at its mask bit",
			cfg:  WebSocket{FromClient: true}, data: wsFrame(fText, nil, "x"),
			want: parse{starts: []uint64{0}, err: ErrWSUnmasked, offset: 1, frames: 1},
		},
		{
			name: "a server frame that is masked is malformed at its mask bit",
			data: wsFrame(fText, key, "x"), want: parse{starts: []uint64{0}, err: ErrWSMasked, offset: 1, frames: 1},
		},
		{
			name: "a 64-bit length with its top bit set is malformed",
			data: []byte{fBinary, 127, 0x80, 0, 0, 0, 0, 0, 0, 0}, want: parse{starts: []uint64{0}, err: ErrWSLength, offset: 2, frames: 1},
		},
		{
			name: "a control frame over 125 bytes is malformed",
			data: closeTooLong, want: parse{err: ErrWSControlTooLong, offset: 1, controls: 1},
		},
		{
			name: "a fragmented control frame is malformed",
			data: wsFrame(0x09, nil, ""), want: parse{err: ErrWSFragmentedControl},
		},
		{name: "opcode 3 is reserved", data: wsFrame(0x83, nil, ""), want: parse{err: ErrWSReservedOpcode}},
		{name: "opcode 0xB is reserved", data: cat(wsFrame(fText, nil, ""), wsFrame(0x8B, nil, "")), want: parse{starts: []uint64{0}, err: ErrWSReservedOpcode, offset: 2, frames: 1}},
		{name: "RSV1 without permessage-deflate is malformed", data: wsFrame(fText|rsv1, nil, "z"), want: parse{err: ErrWSReservedBits}},
		{
			name: "RSV1 with permessage-deflate marks a compressed message",
			cfg:  WebSocket{Deflate: true}, data: wsFrame(fBinary|rsv1, nil, "z"),
			want: parse{starts: []uint64{0}, offset: 3, boundary: true, frames: 1},
		},
		{
			name: "RSV1 on a continuation frame is malformed even with permessage-deflate",
			cfg:  WebSocket{Deflate: true}, data: cat(wsFrame(fTextMore|rsv1, nil, "a"), wsFrame(fCont|rsv1, nil, "b")),
			want: parse{starts: []uint64{0}, err: ErrWSReservedBits, offset: 3, frames: 1},
		},
		{name: "RSV2 is never allowed", cfg: WebSocket{Deflate: true}, data: wsFrame(fText|0x20, nil, ""), want: parse{err: ErrWSReservedBits}},
		{name: "a continuation outside a message is malformed", data: wsFrame(fCont, nil, "x"), want: parse{err: ErrWSContinuation}},
		{
			name: "a text frame inside a fragmented message is malformed",
			data: cat(wsFrame(fTextMore, nil, "a"), wsFrame(fText, nil, "b")),
			want: parse{starts: []uint64{0}, err: ErrWSInterleaved, offset: 3, frames: 1},
		},
		{
			name: "a data frame after the close frame is malformed",
			data: cat(wsFrame(fClose, nil, ""), wsFrame(fText, nil, "late")),
			want: parse{err: ErrWSAfterClose, offset: 2, controls: 1, closed: true},
		},
		{
			name: "a close frame with a 1-byte payload is malformed",
			data: wsFrame(fClose, nil, "x"), want: parse{err: ErrWSCloseLength, offset: 1, controls: 1},
		},
		{
			name: "a message over MaxMessageSize across its fragments is too large at the frame that passes it",
			cfg:  WebSocket{MaxMessageSize: 5}, data: cat(wsFrame(fTextMore, nil, "abc"), wsFrame(fCont, nil, "def")),
			want: parse{starts: []uint64{0}, err: ErrWSTooLarge, offset: 6, frames: 2},
		},
		{
			name: "a message of exactly MaxMessageSize passes and the next starts afresh",
			cfg:  WebSocket{MaxMessageSize: 3}, data: cat(wsFrame(fTextMore, nil, "ab"), wsFrame(fCont, nil, "c"), wsFrame(fText, nil, "xyz")),
			want: parse{starts: []uint64{0, 7}, offset: 12, boundary: true, frames: 3},
		},
		{
			name: "an HTTP response where frames should start is malformed at its first byte",
			data: []byte("HTTP/1.1 200 OK\r\n"), want: parse{err: ErrWSReservedBits},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.want.err == nil {
				tc.want.offset = uint64(len(tc.data))
			}
			assert.Equal(t, tc.want, oracleWS(tc.data, tc.cfg), "the oracle")
			for name, cut := range map[string]func(int) int{"whole": whole, "bytewise": func(int) int { return 1 }} {
				w := tc.cfg
				assert.Equal(t, tc.want, feedChunks(&w, tc.data, cut), name)
			}
		})
	}
}

func TestAWebSocketSessionSplitAtEveryByteCountsAlike(t *testing.T) {
	data := cat(wsFrame(fTextMore, key, "frag"), wsFrame(fPing, key, "p"), wsFrame(fCont, key, "ment"),
		wsFrame(fBinary, key, string(make([]byte, 200))), wsFrame(fClose, key, "\x03\xe8"))
	cfg := WebSocket{FromClient: true}
	want := oracleWS(data, cfg)
	require.NoError(t, want.err)
	require.Len(t, want.starts, 2)
	for k := range len(data) + 1 {
		w := cfg
		n1, err1 := w.Feed(data[:k])
		n2, err2 := w.Feed(data[k:])
		require.NoError(t, err1)
		require.NoError(t, err2)
		assert.Equal(t, 2, n1+n2, "split at %d", k)
		code, closed := w.Closed()
		assert.True(t, closed && code == 1000 && w.Boundary(), "split at %d", k)
	}
}

func TestAFrameOfFiveGiBIsSkippedWithoutBuffering(t *testing.T) {
	var w WebSocket
	hdr := binary.BigEndian.AppendUint64([]byte{fBinary, 127}, 5<<30)
	n, err := w.Feed(hdr)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	zeros := make([]byte, 1<<20)
	for range 5 << 10 {
		n, err := w.Feed(zeros)
		require.NoError(t, err)
		require.Zero(t, n)
	}
	assert.True(t, w.Boundary())
	n, err = w.Feed(wsFrame(fText, nil, "after"))
	require.NoError(t, err)
	assert.Equal(t, 1, n)
	assert.Equal(t, uint64(2), w.Messages())
}

func TestViolationsNameTheCloseCodeAnEndpointAnswers(t *testing.T) {
	assert.Equal(t, CloseProtocolError, ErrWSUnmasked.CloseCode())
	assert.ErrorIs(t, ErrWSUnmasked, ErrMalformed)
	assert.Equal(t, CloseMessageTooBig, ErrWSTooLarge.CloseCode())
	assert.ErrorIs(t, ErrWSTooLarge, ErrTooLarge)
}
