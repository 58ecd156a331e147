package messages

// The WebSocket opcodes (RFC 6455 §5.2).
const (
	opContinuation = 0x0
	opText         = 0x1
	opBinary       = 0x2
	opClose        = 0x8
	opPing         = 0x9
	opPong         = 0xA
)

// Where a WebSocket framer is in the current frame.
const (
	wsFirst   uint8 = iota // before a frame's first byte: a frame boundary
	wsSecond               // before the byte with the mask bit and the 7-bit length
	wsLength               // inside the 16- or 64-bit extended length
	wsKey                  // inside the masking key
	wsPayload              // inside the payload
)

// WebSocket counts the messages of one direction of a WebSocket session after a successful
// upgrade (RFC 6455): frames of 2 to 14 header bytes (FIN, three reserved bits, an opcode, the mask
// bit, a 7-bit length or 126/127 followed by a 16- or 64-bit length, a 4-byte masking key when
// masked) and their payloads, split by the chunks anywhere. It checks every header rule of §5
// that a header shows: reserved bits and opcodes, masking (frames from the client masked, from the
// server not), control frames of at most 125 bytes and never fragmented, continuations only inside
// a fragmented message, no data frame after the close frame, the 64-bit length's top bit clear. It
// does not check what needs the payload (UTF-8 of text, close codes) or the minimal length
// encoding, which endpoints check themselves.
//
// The zero value counts frames from the server, without extensions and without a size limit. A
// WebSocket is not safe for concurrent use; a session has one per direction.
type WebSocket struct {
	// FromClient selects the direction: true for client-to-server frames, which must be masked,
	// false for server-to-client frames, which must not be.
	FromClient bool
	// Deflate allows RSV1 on the first frame of a text or binary message, where permessage-deflate
	// (RFC 7692, negotiated in the 101 response's Sec-WebSocket-Extensions) marks a compressed
	// message. RSV2 and RSV3 are never allowed.
	Deflate bool
	// MaxMessageSize, when not 0, is the most payload bytes the frames of one message may announce
	// together; more is ErrWSTooLarge when the frame's length completes.
	MaxMessageSize uint64

	stage     uint8
	first     uint8 // the current frame's first byte
	lenLeft   uint8 // extended length bytes still to read
	keyLeft   uint8 // masking key bytes still to read
	captured  uint8 // close code bytes captured so far
	inMessage bool  // a fragmented message is open: the next data frame must be a continuation
	closed    bool  // a close frame was seen
	masked    bool  // the current frame is masked
	key       [4]byte
	code      uint16 // the close frame's code, once captured
	length    uint64 // the current frame's payload length
	left      uint64 // payload bytes left to pass over
	msgSize   uint64 // payload bytes the current message announced so far
	err       *Error
	messages  uint64
	frames    uint64 // data frames (text, binary, continuation)
	controls  uint64
	offset    uint64
}

// Next consumes chunk up to and including the first byte of the next message that starts in it
// (the first byte of a text or binary frame) and returns that byte's offset in chunk. When no
// message starts in chunk, Next consumes all of it and returns -1, false; so it does after a
// violation, having consumed chunk up to the byte that made the stream invalid (Err reports it).
// Next allocates nothing.
func (w *WebSocket) Next(chunk []byte) (at int, ok bool) {
	if w.err != nil {
		return -1, false
	}
	i := 0
	for i < len(chunk) {
		if w.stage == wsPayload && w.captured >= 2 || w.stage == wsPayload && w.first&0xF != opClose {
			n := min(w.left, uint64(len(chunk)-i))
			w.left -= n
			i += int(n)
			if w.left == 0 {
				w.stage = wsFirst
			}
			continue
		}
		var err *Error
		starts := false
		switch b := chunk[i]; w.stage {
		case wsFirst:
			starts, err = w.frameStart(b)
		case wsSecond:
			err = w.second(b)
		case wsLength:
			err = w.lengthByte(b)
		case wsKey:
			w.key[4-w.keyLeft] = b
			if w.keyLeft--; w.keyLeft == 0 {
				w.payloadStart()
			}
		case wsPayload: // the first two payload bytes of a close frame: its code
			w.captureCode(b)
		}
		if err != nil {
			w.err = err
			w.offset += uint64(i)
			return -1, false
		}
		i++
		if starts {
			w.offset += uint64(i)
			return i - 1, true
		}
	}
	w.offset += uint64(i)
	return -1, false
}

// frameStart checks a frame's first byte and reports whether it starts a message.
func (w *WebSocket) frameStart(b byte) (bool, *Error) {
	fin, op := b&0x80 != 0, b&0x0F
	control := op&0x8 != 0
	switch {
	case b&0x30 != 0 || b&0x40 != 0 && !(w.Deflate && (op == opText || op == opBinary)):
		return false, ErrWSReservedBits
	case op > opBinary && op < opClose || op > opPong:
		return false, ErrWSReservedOpcode
	case control && !fin:
		return false, ErrWSFragmentedControl
	case op == opContinuation && !w.inMessage:
		return false, ErrWSContinuation
	case (op == opText || op == opBinary) && w.inMessage:
		return false, ErrWSInterleaved
	case !control && w.closed:
		return false, ErrWSAfterClose
	}
	w.first, w.stage = b, wsSecond
	if control {
		w.controls++
		return false, nil
	}
	w.frames++
	w.inMessage = !fin
	if op == opContinuation {
		return false, nil
	}
	w.msgSize = 0
	w.messages++
	return true, nil
}

// second checks the byte with the mask bit and the 7-bit length.
func (w *WebSocket) second(b byte) *Error {
	w.masked = b&0x80 != 0
	switch n := b & 0x7F; {
	case w.FromClient && !w.masked:
		return ErrWSUnmasked
	case !w.FromClient && w.masked:
		return ErrWSMasked
	case w.first&0x8 != 0 && n > 125:
		return ErrWSControlTooLong
	case n == 126:
		w.stage, w.lenLeft, w.length = wsLength, 2, 0
	case n == 127:
		w.stage, w.lenLeft, w.length = wsLength, 8, 0
	default:
		w.length = uint64(n)
		return w.lengthDone()
	}
	return nil
}

// lengthByte reads one byte of the extended length.
func (w *WebSocket) lengthByte(b byte) *Error {
	if w.lenLeft == 8 && b&0x80 != 0 {
		return ErrWSLength
	}
	w.length = w.length<<8 | uint64(b)
	if w.lenLeft--; w.lenLeft > 0 {
		return nil
	}
	return w.lengthDone()
}

// lengthDone checks the frame's complete length and moves on to the key or the payload.
func (w *WebSocket) lengthDone() *Error {
	op := w.first & 0x0F
	if op == opClose && w.length == 1 {
		return ErrWSCloseLength
	}
	if op&0x8 == 0 {
		if w.MaxMessageSize != 0 && w.length > w.MaxMessageSize-w.msgSize {
			return ErrWSTooLarge
		}
		w.msgSize += w.length
	}
	if w.masked {
		w.stage, w.keyLeft = wsKey, 4
		return nil
	}
	w.payloadStart()
	return nil
}

// payloadStart begins the current frame's payload, or ends an empty frame.
func (w *WebSocket) payloadStart() {
	w.left, w.stage = w.length, wsPayload
	if w.first&0x0F == opClose {
		w.closed, w.captured, w.code = true, 0, 0
	}
	if w.left == 0 {
		w.stage = wsFirst
	}
}

// captureCode reads one of the two code bytes at the start of a close frame's payload.
func (w *WebSocket) captureCode(b byte) {
	if w.masked {
		b ^= w.key[w.captured]
	}
	w.code = w.code<<8 | uint16(b)
	w.captured++
	if w.left--; w.left == 0 {
		w.stage = wsFirst
	}
}

// Feed consumes chunk and returns how many messages started in it, and the violation that
// stopped the framer, if any (the messages before it are counted). Feed allocates nothing.
func (w *WebSocket) Feed(chunk []byte) (started int, err error) {
	for {
		at, ok := w.Next(chunk)
		if !ok {
			return started, w.Err()
		}
		started++
		chunk = chunk[at+1:]
	}
}

// Err returns the violation that stopped the framer, nil while the stream is well formed.
func (w *WebSocket) Err() error { return asError(w.err) }

// Messages returns how many messages started so far.
func (w *WebSocket) Messages() uint64 { return w.messages }

// Frames returns how many data frames (text, binary and continuation) started so far.
func (w *WebSocket) Frames() uint64 { return w.frames }

// ControlFrames returns how many control frames (ping, pong, close) started so far.
func (w *WebSocket) ControlFrames() uint64 { return w.controls }

// Offset returns how many bytes of the stream were consumed: after a violation, the offset of
// the byte that made the stream invalid.
func (w *WebSocket) Offset() uint64 { return w.offset }

// Boundary reports whether the bytes consumed end between two frames (or before the first), the
// only place where a frame, a close frame say, may be written into the stream.
func (w *WebSocket) Boundary() bool { return w.err == nil && w.stage == wsFirst }

// Closed reports whether a close frame started, and its status code once its first two payload
// bytes passed (0 for a close frame without a code, or before they passed).
func (w *WebSocket) Closed() (code uint16, closed bool) {
	if w.captured < 2 {
		return 0, w.closed
	}
	return w.code, w.closed
}
