package messages

import (
	"encoding/binary"
	"math/rand/v2"
)

// parse is what a framer found in a whole stream: the stream offsets of the messages' first
// bytes, the violation and its offset (the stream's length when there is none), whether the
// stream ends between messages or frames, and for WebSocket the frame counts and the close.
type parse struct {
	starts    []uint64
	err       error
	offset    uint64
	boundary  bool
	frames    uint64
	controls  uint64
	closed    bool
	closeCode uint16
}

// oracleGRPC parses a whole gRPC stream at once, without the incremental state of GRPC: each
// message is read from its offset with the prefix in hand.
func oracleGRPC(data []byte, maxSize uint32) parse {
	var p parse
	i := uint64(0)
	n := uint64(len(data))
	for i < n {
		if data[i] > 1 {
			p.err, p.offset = ErrGRPCFlag, i
			return p
		}
		p.starts = append(p.starts, i)
		if n-i < 5 {
			p.offset = n
			return p
		}
		length := binary.BigEndian.Uint32(data[i+1:])
		if maxSize != 0 && length > maxSize {
			p.err, p.offset = ErrGRPCTooLarge, i+4
			return p
		}
		i += 5 + uint64(length)
	}
	p.offset, p.boundary = n, i == n
	return p
}

// oracleWS parses a whole WebSocket stream at once, frame by frame with the header in hand, and
// checks the rules in the order the header's bytes carry them.
func oracleWS(data []byte, cfg WebSocket) parse {
	var p parse
	var msgSize uint64
	inMsg := false
	n := uint64(len(data))
	i := uint64(0)
	fail := func(err error, at uint64) parse {
		p.err, p.offset = err, at
		return p
	}
	for i < n {
		b := data[i]
		fin, op, rsv := b&0x80 != 0, b&0x0F, b>>4&7
		control, dataOp := op >= 8, op == opText || op == opBinary
		switch {
		case rsv&3 != 0 || rsv&4 != 0 && !(cfg.Deflate && dataOp):
			return fail(ErrWSReservedBits, i)
		case op > 2 && op < 8 || op > 10:
			return fail(ErrWSReservedOpcode, i)
		case control && !fin:
			return fail(ErrWSFragmentedControl, i)
		case op == opContinuation && !inMsg:
			return fail(ErrWSContinuation, i)
		case dataOp && inMsg:
			return fail(ErrWSInterleaved, i)
		case !control && p.closed:
			return fail(ErrWSAfterClose, i)
		}
		if control {
			p.controls++
		} else {
			p.frames++
			inMsg = !fin
		}
		if dataOp {
			p.starts = append(p.starts, i)
			msgSize = 0
		}
		if i+1 >= n {
			p.offset = n
			return p
		}
		b1 := data[i+1]
		masked, n7 := b1&0x80 != 0, uint64(b1&0x7F)
		switch {
		case cfg.FromClient && !masked:
			return fail(ErrWSUnmasked, i+1)
		case !cfg.FromClient && masked:
			return fail(ErrWSMasked, i+1)
		case control && n7 > 125:
			return fail(ErrWSControlTooLong, i+1)
		}
		hdr, length := uint64(2), n7
		switch n7 {
		case 126:
			hdr = 4
		case 127:
			hdr = 10
			if i+2 < n && data[i+2]&0x80 != 0 {
				return fail(ErrWSLength, i+2)
			}
		}
		if i+hdr > n {
			p.offset = n
			return p
		}
		switch n7 {
		case 126:
			length = uint64(binary.BigEndian.Uint16(data[i+2:]))
		case 127:
			length = binary.BigEndian.Uint64(data[i+2:])
		}
		if op == opClose && length == 1 {
			return fail(ErrWSCloseLength, i+hdr-1)
		}
		if !control {
			if cfg.MaxMessageSize != 0 && length > cfg.MaxMessageSize-msgSize {
				return fail(ErrWSTooLarge, i+hdr-1)
			}
			msgSize += length
		}
		var key [4]byte
		if masked {
			if i+hdr+4 > n {
				p.offset = n
				return p
			}
			copy(key[:], data[i+hdr:])
			hdr += 4
		}
		if op == opClose {
			p.closed, p.closeCode = true, 0
			if length >= 2 && i+hdr+2 <= n {
				p.closeCode = binary.BigEndian.Uint16([]byte{data[i+hdr] ^ key[0], data[i+hdr+1] ^ key[1]})
			}
		}
		if length > n-i-hdr {
			p.offset = n
			return p
		}
		i += hdr + length
	}
	p.offset, p.boundary = n, true
	return p
}

// framer is what the tests drive: GRPC or WebSocket.
type framer interface {
	Next([]byte) (int, bool)
	Err() error
	Offset() uint64
	Boundary() bool
}

// feedChunks feeds data to f in chunks of the sizes cut returns (0 included) and collects what
// it found the way oracleGRPC and oracleWS report it.
func feedChunks(f framer, data []byte, cut func(rest int) int) parse {
	var p parse
	base := uint64(0)
	for {
		k := min(cut(len(data)), len(data))
		chunk := data[:k]
		for off := 0; ; {
			at, ok := f.Next(chunk[off:])
			if !ok {
				break
			}
			p.starts = append(p.starts, base+uint64(off+at))
			off += at + 1
		}
		base += uint64(k)
		data = data[k:]
		if len(data) == 0 {
			break
		}
	}
	p.err, p.offset, p.boundary = f.Err(), f.Offset(), f.Boundary()
	if w, ok := f.(*WebSocket); ok {
		p.frames, p.controls = w.Frames(), w.ControlFrames()
		p.closeCode, p.closed = w.Closed()
	}
	return p
}

// randomCuts returns chunk sizes drawn from seed: mostly small (0 to 7 bytes, splitting headers),
// sometimes up to 64.
func randomCuts(seed uint64) func(int) int {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	return func(rest int) int {
		if r.IntN(4) == 0 {
			return r.IntN(65)
		}
		return r.IntN(8)
	}
}

// whole feeds everything at once.
func whole(rest int) int { return rest }

// grpcMsg is one length-prefixed message.
func grpcMsg(flag byte, payload string) []byte {
	b := []byte{flag, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(b[1:], uint32(len(payload)))
	return append(b, payload...)
}

// wsFrame is one frame with the minimal length encoding, masked with key when key is not nil.
func wsFrame(first byte, key []byte, payload string) []byte {
	b := []byte{first}
	mask := byte(0)
	if key != nil {
		mask = 0x80
	}
	switch n := len(payload); {
	case n <= 125:
		b = append(b, mask|byte(n))
	case n <= 0xFFFF:
		b = append(b, mask|126)
		b = binary.BigEndian.AppendUint16(b, uint16(n))
	default:
		b = append(b, mask|127)
		b = binary.BigEndian.AppendUint64(b, uint64(n))
	}
	b = append(b, key...)
	for i := range len(payload) {
		c := payload[i]
		if key != nil {
			c ^= key[i%4]
		}
		b = append(b, c)
	}
	return b
}

func cat(parts ...[]byte) []byte {
	var out []byte
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}
