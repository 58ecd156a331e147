package filter

// The trace context of a request, forwarded on its call to the decision service: Envoy's
// callout (proxy_http_call) starts no span and copies no header of the request, so without it
// the service's span would start a trace of its own instead of joining the request's.

// traceHeader is a request header that carries trace context, and the longest value forwarded.
type traceHeader struct {
	name string
	max  int
}

// traceHeaders are the headers forwarded: W3C trace context, B3 (single and multiple headers)
// and Envoy's request id. A value is bounded: a valid traceparent is 55 bytes, a b3 header 68
// at most, an x-b3 id 32 hex digits, an x-request-id a UUID's 36; 512 bytes of tracestate is
// what W3C asks vendors to propagate. A longer value is not forwarded (never truncated: that
// would forward an invalid one), nor is one with a byte that is not visible ASCII or a space.
var traceHeaders = [...]traceHeader{
	{"traceparent", 128},
	{"tracestate", 512},
	{"b3", 128},
	{"x-b3-traceid", 32},
	{"x-b3-spanid", 16},
	{"x-b3-parentspanid", 16},
	{"x-b3-sampled", 8},
	{"x-b3-flags", 8},
	{"x-request-id", 128},
}

// traceContext builds the headers of a call to the service: the client's own, then the trace
// headers of the current request. It reuses its buffers: the headers it returns are valid until
// its next call, and it allocates nothing once warm.
type traceContext struct {
	bufs    [len(traceHeaders)][]byte
	headers [][2]string
}

func newTraceContext() traceContext {
	var t traceContext
	for i, th := range traceHeaders {
		t.bufs[i] = make([]byte, 0, th.max)
	}
	return t
}

// callHeaders returns base followed by the current request's trace headers (the first value of
// each, as the host reads them) that are within their bounds.
func (t *traceContext) callHeaders(h host, base [][2]string) [][2]string {
	t.headers = append(t.headers[:0], base...)
	for i, th := range traceHeaders {
		v, ok := h.header(requestPart, th.name, t.bufs[i][:0])
		if !ok || len(v) == 0 || len(v) > th.max || !traceText(v) {
			continue
		}
		t.headers = append(t.headers, [2]string{th.name, bytesString(v)})
	}
	return t.headers
}

// traceText reports whether v holds visible ASCII and spaces only.
func traceText(v []byte) bool {
	for _, c := range v {
		if c < ' ' || c > '~' {
			return false
		}
	}
	return true
}
