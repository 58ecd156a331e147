package messages

// GRPC counts the length-prefixed messages of one direction of a gRPC stream: the body of a
// request or of a response, where each message is a flag byte (0 uncompressed, 1 compressed), a
// 4-byte big-endian length and that many bytes (gRPC over HTTP/2, "Length-Prefixed-Message"). The
// chunks may split a message anywhere, its prefix included, and may hold many messages.
//
// The zero value is ready and accepts every length up to 4 GiB − 1. A GRPC is not safe for
// concurrent use; a stream has one per direction.
type GRPC struct {
	// MaxMessageSize, when not 0, is the largest length a message may announce; a longer one is
	// ErrGRPCTooLarge when its prefix completes, before any of its bytes is read. gRPC
	// implementations default to 4 MiB for what they receive.
	MaxMessageSize uint32

	need     uint8  // length bytes still to read: 4..1 inside a prefix, 0 outside
	length   uint32 // the length read so far
	skip     uint32 // message bytes left to pass over
	err      *Error
	messages uint64
	offset   uint64
}

// Next consumes chunk up to and including the first byte of the next message that starts in it
// and returns that byte's offset in chunk. When no message starts in chunk, Next consumes all of
// it and returns -1, false; so it does after a violation, having consumed chunk up to the byte
// that made the stream invalid (Err reports it). Next allocates nothing.
func (g *GRPC) Next(chunk []byte) (at int, ok bool) {
	if g.err != nil {
		return -1, false
	}
	i := 0
	for i < len(chunk) {
		switch {
		case g.skip > 0:
			n := min(uint64(g.skip), uint64(len(chunk)-i))
			g.skip -= uint32(n)
			i += int(n)
		case g.need > 0:
			g.length = g.length<<8 | uint32(chunk[i])
			if g.need--; g.need == 0 {
				if g.MaxMessageSize != 0 && g.length > g.MaxMessageSize {
					return g.fail(ErrGRPCTooLarge, i)
				}
				g.skip = g.length
			}
			i++
		default: // the flag byte of the next message
			if chunk[i] > 1 {
				return g.fail(ErrGRPCFlag, i)
			}
			g.need, g.length = 4, 0
			g.messages++
			g.offset += uint64(i + 1)
			return i, true
		}
	}
	g.offset += uint64(i)
	return -1, false
}

// fail records err at chunk[i], which is not consumed.
func (g *GRPC) fail(err *Error, i int) (int, bool) {
	g.err = err
	g.offset += uint64(i)
	return -1, false
}

// Feed consumes chunk and returns how many messages started in it, and the violation that
// stopped the framer, if any (the messages before it are counted). Feed allocates nothing.
func (g *GRPC) Feed(chunk []byte) (started int, err error) {
	for {
		at, ok := g.Next(chunk)
		if !ok {
			return started, g.Err()
		}
		started++
		chunk = chunk[at+1:]
	}
}

// Err returns the violation that stopped the framer, nil while the stream is well formed.
func (g *GRPC) Err() error { return asError(g.err) }

// Messages returns how many messages started so far.
func (g *GRPC) Messages() uint64 { return g.messages }

// Offset returns how many bytes of the stream were consumed: after a violation, the offset of
// the byte that made the stream invalid.
func (g *GRPC) Offset() uint64 { return g.offset }

// Boundary reports whether the bytes consumed end between two messages (or before the first), so
// that bytes written there (a message, or the stream's end) do not cut a message.
func (g *GRPC) Boundary() bool { return g.err == nil && g.need == 0 && g.skip == 0 }
