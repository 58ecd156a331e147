package messages

import (
	"errors"
	"strconv"
	"unicode/utf8"
)

// WebSocket close codes (RFC 6455 §7.4.1 and IANA's WebSocket Close Code Number Registry).
const (
	CloseProtocolError   uint16 = 1002
	CloseMessageTooBig   uint16 = 1009
	ClosePolicyViolation uint16 = 1008 // the session broke a policy: over its message limit
	CloseTryAgainLater   uint16 = 1013 // the server is overloaded for now: come back later
)

// MaxCloseReason is the longest close reason in bytes: a control frame's payload holds at most 125
// bytes, two of them the code.
const MaxCloseReason = 123

// Errors of AppendClose.
var (
	ErrCloseCode   = errors.New("messages: the close code is not one an endpoint may send")
	ErrCloseReason = errors.New("messages: the close reason is not UTF-8")
)

// AppendClose appends to dst a close frame as a server sends it to a client: FIN, opcode 8, not
// masked, payload the code (2 bytes, big-endian) and reason. A reason longer than MaxCloseReason
// bytes is cut after its last whole UTF-8 character that fits. The code must be one an endpoint
// may send (1000–1003, 1007–1014, 3000–4999; not 1005, 1006 or 1015, which only report) and the
// reason valid UTF-8; otherwise dst comes back unchanged with ErrCloseCode or ErrCloseReason.
// AppendClose allocates only when dst lacks room for the frame's 4 + len(reason) bytes.
func AppendClose(dst []byte, code uint16, reason string) ([]byte, error) {
	if !sendableCode(code) {
		return dst, ErrCloseCode
	}
	if !utf8.ValidString(reason) {
		return dst, ErrCloseReason
	}
	if len(reason) > MaxCloseReason {
		n := MaxCloseReason
		for n > 0 && !utf8.RuneStart(reason[n]) {
			n--
		}
		reason = reason[:n]
	}
	dst = append(dst, 0x80|opClose, byte(2+len(reason)), byte(code>>8), byte(code))
	return append(dst, reason...), nil
}

func sendableCode(c uint16) bool {
	switch {
	case c >= 1000 && c <= 1003, c >= 1007 && c <= 1014:
		return true
	}
	return c >= 3000 && c <= 4999
}

// gRPC status codes a limiter answers with (grpc/grpc doc/statuscodes.md).
const (
	GRPCStatusResourceExhausted uint32 = 8
	GRPCStatusInternal          uint32 = 13
	GRPCStatusUnavailable       uint32 = 14
)

// GRPCEnd is what a filter passes to proxy_send_local_response to end a gRPC stream whose response
// has not reached the client. For a request whose content-type is application/grpc (or
// application/grpc+...), Envoy answers trailers-only: one HEADERS frame with end of stream whose
// fields AppendTrailersOnly lists, :status 200 whatever HTTPStatus says (docs/envoy-host.md §13).
type GRPCEnd struct {
	// HTTPStatus is the status passed to Envoy; a gRPC client sees it only when Envoy did not take
	// the request for gRPC (it then answers a plain HTTP reply with it).
	HTTPStatus uint32
	// GRPCStatus must be passed explicitly: without one Envoy maps HTTPStatus (429 becomes 14
	// UNAVAILABLE, which clients retry at once).
	GRPCStatus uint32
	// Message is the local reply's body, which Envoy percent-encodes into grpc-message.
	Message string
}

// ResourceExhausted is the answer to a stream over its message limit: 429 and RESOURCE_EXHAUSTED.
func ResourceExhausted(message string) GRPCEnd {
	return GRPCEnd{HTTPStatus: 429, GRPCStatus: GRPCStatusResourceExhausted, Message: message}
}

// AppendTrailersOnly appends to dst the header fields of the trailers-only response Envoy sends for
// a gRPC local reply with status and message (Envoy's Utility::prepareLocalReply): :status 200,
// content-type application/grpc, grpc-status, and grpc-message when message is not empty.
func AppendTrailersOnly(dst [][2]string, status uint32, message string) [][2]string {
	dst = append(dst, [2]string{":status", "200"}, [2]string{"content-type", "application/grpc"},
		[2]string{"grpc-status", strconv.FormatUint(uint64(status), 10)})
	if message != "" {
		dst = append(dst, [2]string{"grpc-message", string(AppendPercentEncoded(nil, message))})
	}
	return dst
}

// AppendPercentEncoded appends msg to dst percent-encoded as Envoy writes grpc-message
// (PercentEncoding::encode): every byte below 0x20 or from 0x7E ('~') up, and '%', becomes %XX
// (upper-case hex). gRPC would leave '~' as it is; decoders accept both.
func AppendPercentEncoded(dst []byte, msg string) []byte {
	const hex = "0123456789ABCDEF"
	for i := 0; i < len(msg); i++ {
		c := msg[i]
		if c < 0x20 || c >= 0x7E || c == '%' {
			dst = append(dst, '%', hex[c>>4], hex[c&15])
			continue
		}
		dst = append(dst, c)
	}
	return dst
}
