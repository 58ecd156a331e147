package messages

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestGRPCFraming(t *testing.T) {
	tests := []struct {
		name     string
		data     []byte
		max      uint32
		starts   []uint64
		err      error
		offset   uint64
		boundary bool
	}{
		{name: "an empty stream has no messages and ends between messages", boundary: true},
		{name: "one uncompressed message counts once", data: grpcMsg(0, "hello"), starts: []uint64{0}, offset: 10, boundary: true},
		{name: "a compressed message counts like an uncompressed one", data: grpcMsg(1, "\x1f\x8b"), starts: []uint64{0}, offset: 7, boundary: true},
		{name: "an empty message counts", data: grpcMsg(0, ""), starts: []uint64{0}, offset: 5, boundary: true},
		{
			name: "three messages in one chunk count three, each at its flag byte",
			data: cat(grpcMsg(0, "a"), grpcMsg(1, "bc"), grpcMsg(0, "")), starts: []uint64{0, 6, 13}, offset: 18, boundary: true,
		},
		{name: "a message counts at its flag byte before its prefix is whole", data: []byte{0, 0, 0}, starts: []uint64{0}, offset: 3},
		{name: "a message counts before its body has passed", data: grpcMsg(0, "abcdef")[:7], starts: []uint64{0}, offset: 7},
		{name: "a flag byte of 2 is malformed where it stands", data: cat(grpcMsg(0, "ok"), []byte{2, 0, 0, 0, 0}), starts: []uint64{0}, err: ErrGRPCFlag, offset: 7},
		{name: "text where a message should start is malformed at its first byte", data: []byte("GET / HTTP/1.1\r\n"), err: ErrGRPCFlag},
		{name: "a message over MaxMessageSize fails when its prefix completes", data: grpcMsg(0, "12345"), max: 4, starts: []uint64{0}, err: ErrGRPCTooLarge, offset: 4},
		{name: "a message of exactly MaxMessageSize passes", data: grpcMsg(0, "1234"), max: 4, starts: []uint64{0}, offset: 9, boundary: true},
		{name: "a prefix announcing 4 GiB − 1 is over a 4 MiB limit", data: []byte{0, 0xff, 0xff, 0xff, 0xff}, max: 4 << 20, starts: []uint64{0}, err: ErrGRPCTooLarge, offset: 4},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			want := parse{starts: tc.starts, err: tc.err, offset: tc.offset, boundary: tc.boundary}
			assert.Equal(t, want, oracleGRPC(tc.data, tc.max), "the oracle")
			for name, cut := range map[string]func(int) int{"whole": whole, "bytewise": func(int) int { return 1 }} {
				g := &GRPC{MaxMessageSize: tc.max}
				assert.Equal(t, want, feedChunks(g, tc.data, cut), name)
			}
		})
	}
}

func TestAGRPCStreamSplitAtEveryByteCountsAlike(t *testing.T) {
	data := cat(grpcMsg(0, "first"), grpcMsg(1, ""), grpcMsg(0, string(make([]byte, 300))), grpcMsg(1, "z"))
	want := oracleGRPC(data, 0)
	require.Len(t, want.starts, 4)
	for k := range len(data) + 1 {
		var g GRPC
		n1, err1 := g.Feed(data[:k])
		n2, err2 := g.Feed(data[k:])
		require.NoError(t, err1)
		require.NoError(t, err2)
		assert.Equal(t, len(want.starts), n1+n2, "split at %d", k)
		assert.True(t, g.Boundary(), "split at %d", k)
	}
}

func TestAFourGiBPrefixIsSkippedWithoutBuffering(t *testing.T) {
	var g GRPC
	n, err := g.Feed([]byte{1, 0xff, 0xff, 0xff, 0xff})
	require.NoError(t, err)
	require.Equal(t, 1, n)
	zeros := make([]byte, 1<<20)
	for range 4095 {
		n, err := g.Feed(zeros)
		require.NoError(t, err)
		require.Zero(t, n, "the body of the big message holds no message start")
	}
	assert.False(t, g.Boundary())
	rest := append(zeros[:(1<<20)-1:(1<<20)-1], grpcMsg(0, "next")...)
	n, err = g.Feed(rest)
	require.NoError(t, err)
	assert.Equal(t, 1, n, "the message after it counts")
	assert.Equal(t, uint64(2), g.Messages())
	assert.Equal(t, uint64(5+0xffffffff+9), g.Offset())
	assert.True(t, g.Boundary())
}

func TestAfterAViolationEveryFeedReportsItAndConsumesNothing(t *testing.T) {
	var g GRPC
	n, err := g.Feed([]byte{0, 0, 0, 0, 1, 'x', 7, 0})
	assert.Equal(t, 1, n)
	require.ErrorIs(t, err, ErrGRPCFlag)
	assert.ErrorIs(t, err, ErrMalformed)
	off := g.Offset()
	n, err = g.Feed(grpcMsg(0, "fine"))
	assert.Zero(t, n)
	assert.ErrorIs(t, err, ErrGRPCFlag)
	assert.Equal(t, off, g.Offset())
	assert.False(t, g.Boundary(), "a broken stream has no boundary to write at")
	var fe *Error
	require.True(t, errors.As(err, &fe))
	assert.Equal(t, GRPCStatusInternal, fe.GRPCStatus(), "grpc-go answers a bad flag byte with INTERNAL")
	assert.ErrorIs(t, ErrGRPCTooLarge, ErrTooLarge)
	assert.Equal(t, GRPCStatusResourceExhausted, ErrGRPCTooLarge.GRPCStatus())
}

func TestNextGivesEachMessageStartInTheChunk(t *testing.T) {
	var g GRPC
	chunk := cat(grpcMsg(0, "ab")[4:], grpcMsg(0, "c"), grpcMsg(1, "de"))
	g.Feed(grpcMsg(0, "ab")[:4])
	var at []int
	for off := 0; ; {
		i, ok := g.Next(chunk[off:])
		if !ok {
			break
		}
		at = append(at, off+i)
		off += i + 1
	}
	assert.Equal(t, []int{3, 9}, at, "offsets in the chunk of the two messages that start in it")
}
