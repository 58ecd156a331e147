package messages

import "errors"

// The two kinds of framing violation; every [*Error] wraps one of them.
var (
	// ErrMalformed is framing the peer got wrong: the bytes are not a gRPC or WebSocket stream.
	ErrMalformed = errors.New("messages: malformed framing")
	// ErrTooLarge is a message whose announced length is over the framer's MaxMessageSize.
	ErrTooLarge = errors.New("messages: message over the size limit")
)

// Error is one framing violation. Each is a package variable, so errors.Is compares them and
// reporting one allocates nothing.
type Error struct {
	kind       error
	reason     string
	grpcStatus uint32
	closeCode  uint16
}

// Error returns the violation in a sentence.
func (e *Error) Error() string { return "messages: " + e.reason }

// Unwrap returns ErrMalformed or ErrTooLarge.
func (e *Error) Unwrap() error { return e.kind }

// GRPCStatus is the gRPC status an endpoint answers the violation with: 13 INTERNAL for malformed
// framing, 8 RESOURCE_EXHAUSTED for a message over the size limit.
func (e *Error) GRPCStatus() uint32 { return e.grpcStatus }

// CloseCode is the WebSocket close code an endpoint answers the violation with (RFC 6455 §7.4.1):
// 1002 for a protocol error, 1009 for a message over the size limit.
func (e *Error) CloseCode() uint16 { return e.closeCode }

// asError returns e as an error, nil (not a nil *Error) when there is none.
func asError(e *Error) error {
	if e == nil {
		return nil
	}
	return e
}

func malformed(reason string) *Error {
	return &Error{kind: ErrMalformed, reason: reason, grpcStatus: GRPCStatusInternal, closeCode: CloseProtocolError}
}

func tooLarge(reason string) *Error {
	return &Error{kind: ErrTooLarge, reason: reason, grpcStatus: GRPCStatusResourceExhausted, closeCode: CloseMessageTooBig}
}

// The violations of a gRPC stream.
var (
	ErrGRPCFlag     = malformed("grpc: a message's flag byte is neither 0 (uncompressed) nor 1 (compressed)")
	ErrGRPCTooLarge = tooLarge("grpc: a message's length prefix is over MaxMessageSize")
)

// The violations of a WebSocket stream (RFC 6455 §5), in the order a frame's bytes reveal them.
var (
	ErrWSReservedBits      = malformed("websocket: a reserved bit is set that no negotiated extension defines")
	ErrWSReservedOpcode    = malformed("websocket: a frame has a reserved opcode")
	ErrWSFragmentedControl = malformed("websocket: a control frame is fragmented (FIN not set)")
	ErrWSContinuation      = malformed("websocket: a continuation frame is outside a fragmented message")
	ErrWSInterleaved       = malformed("websocket: a text or binary frame starts inside a fragmented message")
	ErrWSAfterClose        = malformed("websocket: a data frame follows the close frame")
	ErrWSUnmasked          = malformed("websocket: a frame from the client is not masked")
	ErrWSMasked            = malformed("websocket: a frame from the server is masked")
	ErrWSControlTooLong    = malformed("websocket: a control frame's payload is over 125 bytes")
	ErrWSLength            = malformed("websocket: a 64-bit payload length has its most significant bit set")
	ErrWSCloseLength       = malformed("websocket: a close frame's payload is 1 byte, too short for a code")
	ErrWSTooLarge          = tooLarge("websocket: a message's payload is over MaxMessageSize")
)
