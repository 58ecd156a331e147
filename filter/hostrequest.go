package filter

import (
	"encoding/binary"
	"unsafe"

	"github.com/meshlimit/meshlimit/rules"
)

// hostRequest implements Request over the host for the request being decided. Every value is read from
// the host at most once (each read crosses into the host and back into the guest's allocator), and
// only when a rule asks for it. The first header lookup reads every request header with one pairs call
// (proxy_get_header_map_pairs), because proxy_get_header_map_value returns only the first value of a
// repeated header and rules must see them all; later lookups, pseudo-headers included, scan that list.
//
// The two properties every request may need (route name, source address) are received into buffers
// kept across requests, so reading them allocates nothing; their string views are valid for the
// request being decided only.
type hostRequest struct {
	host                                   host
	read                                   uint8 // bit set of the values already read
	method, path, authority, route, source string
	headers                                [][2]string // every request header, in the host's order
	norm                                   []byte      // the normalized path; its buffer is kept across requests
	routeBuf, sourceBuf                    []byte      // what route and source view
	methodBuf, pathBuf, authorityBuf       []byte      // and method, path and authority when read one by one
	headerBuf                              []byte      // what Header's last value read alone views
	propPath                               []byte      // Property's encoded path, reused
	// The last source address parsed (readAddr: this request's), kept across requests (one
	// decision per plugin: per VM), so that a client that comes back is not parsed again:
	// lastAddr is lastSource parsed, and its text views lastSource, which only SourceAddr writes.
	lastSource []byte
	lastAddr   rules.ClientAddr
	lastKnown  bool
}

const (
	readMethod uint8 = 1 << iota
	readPath
	readHost
	readRoute
	readSource
	readHeaders
	readNorm
	readAddr
)

func (r *hostRequest) reset() {
	r.read = 0
	r.headers = nil
}

// loadHeaders reads every request header once.
func (r *hostRequest) loadHeaders() {
	if r.read&readHeaders == 0 {
		r.headers, _ = r.host.headers(requestPart)
		r.read |= readHeaders
	}
}

// HeaderValue implements Request.
func (r *hostRequest) HeaderValue(name string, i int) (string, bool) {
	r.loadHeaders()
	for j := range r.headers {
		if r.headers[j][0] == name {
			if i == 0 {
				return r.headers[j][1], true
			}
			i--
		}
	}
	return "", false
}

// Header returns the first value of the request header name, as proxy_get_header_map_value would:
// from the headers already read, else with that one call (the value is valid until the next Header).
func (r *hostRequest) Header(name string) (string, bool) {
	if r.read&readHeaders != 0 {
		return r.HeaderValue(name, 0)
	}
	v, ok := r.host.header(requestPart, name, r.headerBuf)
	r.headerBuf = v
	return bytesString(v), ok
}

// NormalizedPath implements Request.
func (r *hostRequest) NormalizedPath() string {
	if r.read&readNorm == 0 {
		r.norm = rules.AppendNormalizedPath(r.norm[:0], r.Path())
		r.read |= readNorm
	}
	return unsafe.String(unsafe.SliceData(r.norm), len(r.norm))
}

// pseudo reads a pseudo-header once per request: from the headers already read, else with one call
// into buf.
func (r *hostRequest) pseudo(bit uint8, dst *string, buf *[]byte, name string) string {
	if r.read&bit == 0 {
		if r.read&readHeaders != 0 {
			*dst, _ = r.HeaderValue(name, 0)
		} else {
			v, ok := r.host.header(requestPart, name, *buf)
			*buf, *dst = v, ""
			if ok {
				*dst = bytesString(v)
			}
		}
		r.read |= bit
	}
	return *dst
}

// property reads a fixed property (path encoded by propertyPath) into buf once per request.
func (r *hostRequest) property(bit uint8, dst *string, buf *[]byte, path []byte) string {
	if r.read&bit == 0 {
		v, ok := r.host.property(path, *buf)
		*buf, *dst = v, ""
		if ok {
			*dst = bytesString(v)
		}
		r.read |= bit
	}
	return *dst
}

var (
	routeNamePath     = propertyPath("xds", "route_name")
	sourceAddressPath = propertyPath("source", "address")
)

// Method implements Request.
func (r *hostRequest) Method() string {
	return r.pseudo(readMethod, &r.method, &r.methodBuf, ":method")
}

// Path implements Request.
func (r *hostRequest) Path() string { return r.pseudo(readPath, &r.path, &r.pathBuf, ":path") }

// Host implements Request.
func (r *hostRequest) Host() string {
	return r.pseudo(readHost, &r.authority, &r.authorityBuf, ":authority")
}

// RouteName implements Request.
func (r *hostRequest) RouteName() string {
	return r.property(readRoute, &r.route, &r.routeBuf, routeNamePath)
}

// SourceAddress implements Request.
func (r *hostRequest) SourceAddress() string {
	return r.property(readSource, &r.source, &r.sourceBuf, sourceAddressPath)
}

// SourceAddr implements Request: source.address is parsed once, for every key part and shedder
// share key of the request, and not at all when it is the address the request before parsed.
func (r *hostRequest) SourceAddr() rules.ClientAddr {
	if r.read&readAddr == 0 {
		src := r.SourceAddress()
		if !r.lastKnown || !sameBytes(r.lastSource, src) {
			r.lastSource = append(r.lastSource[:0], src...)
			r.lastAddr, r.lastKnown = rules.ParseClientAddr(bytesString(r.lastSource)), true
		}
		r.read |= readAddr
	}
	return r.lastAddr
}

// Property implements Request. The value is received into fresh memory: a request may hold several.
func (r *hostRequest) Property(path []string) (string, bool) {
	r.propPath = r.propPath[:0]
	for i, seg := range path {
		if i > 0 {
			r.propPath = append(r.propPath, 0)
		}
		r.propPath = append(r.propPath, seg...)
	}
	if len(path) == 0 {
		return "", false
	}
	v, ok := r.host.property(r.propPath, nil)
	if !ok {
		return "", false
	}
	return bytesString(v), true
}

// hostResponse reads the upstream's response headers: the first value of a header, as Envoy's
// proxy_get_header_map_value gives it, received into a buffer it reuses (no allocation once it has
// grown). A value is valid until the next read: its caller uses it at once.
type hostResponse struct {
	host host
	buf  []byte
}

// header returns the first value of the response header name.
func (r *hostResponse) header(name string) (string, bool) {
	v, ok := r.host.header(responsePart, name, r.buf)
	r.buf = v
	if !ok {
		return "", false
	}
	return bytesString(v), true
}

// HeaderValue implements rules.HeaderSource (for count_on): the first value only.
func (r *hostResponse) HeaderValue(name string, i int) (string, bool) {
	if i > 0 {
		return "", false
	}
	return r.header(name)
}

// bytesString views b as a string without copying. Only for bytes that nothing modifies while the
// string is in use: the host's fresh copy, or a receive buffer within the request that filled it.
func bytesString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// sameBytes reports whether b holds s, comparing 8 bytes at a time: on wasm a string comparison
// calls memequal, which costs more than an address's few words.
func sameBytes(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	t := unsafe.Slice(unsafe.StringData(s), len(s)) // read only
	i := 0
	for ; i+8 <= len(b); i += 8 {
		if binary.LittleEndian.Uint64(b[i:]) != binary.LittleEndian.Uint64(t[i:]) {
			return false
		}
	}
	for ; i < len(b); i++ {
		if b[i] != t[i] {
			return false
		}
	}
	return true
}
