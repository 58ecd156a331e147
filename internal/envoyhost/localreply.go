package envoyhost

import (
	"strconv"
	"strings"
)

// localReplyHeaders renders a local reply as Envoy's Utility::prepareLocalReply does (§4, §13)
// and returns its headers and the body the client gets. A gRPC request gets a trailers-only
// response and no body: :status 200, content-type application/grpc, grpc-status (a grpc-status
// header the filter passed, else the filter's gRPC status, else the one Envoy maps from the HTTP
// status) and grpc-message (the body, percent-encoded), without content-length. Any other
// request gets the status, the filter's headers, and content-length with a text/plain
// content-type when there is a body.
func (s *Stream) localReplyHeaders(r *LocalReply) (Headers, []byte) {
	if !s.grpc {
		h := make(Headers, 0, len(r.Headers)+3)
		h = append(h, [2]string{":status", strconv.Itoa(r.Status)})
		h = append(h, r.Headers...)
		if len(r.Body) > 0 {
			h = append(h, [2]string{"content-length", strconv.Itoa(len(r.Body))})
			if _, ok := h.Get("content-type"); !ok {
				h = append(h, [2]string{"content-type", "text/plain"})
			}
		}
		return h, append([]byte(nil), r.Body...)
	}
	h := make(Headers, 0, len(r.Headers)+4)
	h = append(h, [2]string{":status", "200"})
	for _, kv := range r.Headers {
		if kv[0] != "content-type" && kv[0] != "content-length" && (kv[0] != "grpc-message" || len(r.Body) == 0) {
			h = append(h, kv)
		}
	}
	h = append(h, [2]string{"content-type", "application/grpc"})
	if _, ok := h.Get("grpc-status"); !ok {
		code := r.GRPCStatus
		if code < 0 {
			code = httpToGRPCStatus(r.Status)
		}
		h = append(h, [2]string{"grpc-status", strconv.Itoa(int(code))})
	}
	if len(r.Body) > 0 {
		h = append(h, [2]string{"grpc-message", percentEncode(r.Body)})
	}
	return h, nil
}

// isGRPC reports whether Envoy takes a request for gRPC (Grpc::Common::isGrpcRequestHeaders): a
// :path and a content-type that is application/grpc or starts with application/grpc+.
func isGRPC(h Headers) bool {
	if _, ok := h.Get(":path"); !ok {
		return false
	}
	ct, _ := h.Get("content-type")
	rest, ok := strings.CutPrefix(ct, "application/grpc")
	return ok && (rest == "" || rest[0] == '+')
}

// httpToGRPCStatus is Envoy's Grpc::Utility::httpToGrpcStatus.
func httpToGRPCStatus(status int) int32 {
	switch status {
	case 400:
		return 13 // INTERNAL
	case 401:
		return 16 // UNAUTHENTICATED
	case 403:
		return 7 // PERMISSION_DENIED
	case 404:
		return 12 // UNIMPLEMENTED
	case 429, 502, 503, 504:
		return 14 // UNAVAILABLE
	}
	return 2 // UNKNOWN
}

// percentEncode is Envoy's PercentEncoding::encode for grpc-message: bytes below ' ', from '~'
// up, and '%' become %XX.
func percentEncode(b []byte) string {
	const hex = "0123456789ABCDEF"
	var sb strings.Builder
	for _, c := range b {
		if c < ' ' || c >= '~' || c == '%' {
			sb.WriteByte('%')
			sb.WriteByte(hex[c>>4])
			sb.WriteByte(hex[c&15])
			continue
		}
		sb.WriteByte(c)
	}
	return sb.String()
}
