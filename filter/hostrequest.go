package filter

import (
	"unsafe"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm"
)

// hostRequest implements Request over the host for the request being decided. Every value is read from
// the host at most once (each read crosses into the host and back into the guest's allocator), and
// only when a rule asks for it.
type hostRequest struct {
	read                              uint8 // bit set of the fixed values already read
	method, path, host, route, source string
	headers                           []cachedHeader
}

type cachedHeader struct {
	name, value string
	ok          bool
}

const (
	readMethod uint8 = 1 << iota
	readPath
	readHost
	readRoute
	readSource
)

func (r *hostRequest) reset() {
	r.read = 0
	r.headers = r.headers[:0]
}

// Header implements Request.
func (r *hostRequest) Header(name string) (string, bool) {
	for i := range r.headers {
		if r.headers[i].name == name {
			return r.headers[i].value, r.headers[i].ok
		}
	}
	v, err := proxywasm.GetHttpRequestHeader(name)
	r.headers = append(r.headers, cachedHeader{name: name, value: v, ok: err == nil})
	return v, err == nil
}

func (r *hostRequest) pseudo(bit uint8, dst *string, name string) string {
	if r.read&bit == 0 {
		*dst, _ = proxywasm.GetHttpRequestHeader(name)
		r.read |= bit
	}
	return *dst
}

func (r *hostRequest) property(bit uint8, dst *string, path []string) string {
	if r.read&bit == 0 {
		v, err := proxywasm.GetProperty(path)
		*dst = ""
		if err == nil {
			*dst = bytesString(v)
		}
		r.read |= bit
	}
	return *dst
}

var (
	routeNamePath     = []string{"xds", "route_name"}
	sourceAddressPath = []string{"source", "address"}
)

// Method implements Request.
func (r *hostRequest) Method() string { return r.pseudo(readMethod, &r.method, ":method") }

// Path implements Request.
func (r *hostRequest) Path() string { return r.pseudo(readPath, &r.path, ":path") }

// Host implements Request.
func (r *hostRequest) Host() string { return r.pseudo(readHost, &r.host, ":authority") }

// RouteName implements Request.
func (r *hostRequest) RouteName() string { return r.property(readRoute, &r.route, routeNamePath) }

// SourceAddress implements Request.
func (r *hostRequest) SourceAddress() string {
	return r.property(readSource, &r.source, sourceAddressPath)
}

// Property implements Request.
func (r *hostRequest) Property(path []string) (string, bool) {
	v, err := proxywasm.GetProperty(path)
	if err != nil {
		return "", false
	}
	return bytesString(v), true
}

// bytesString views b as a string without copying. Only for bytes the host has just copied into
// memory of their own, which nothing modifies afterwards.
func bytesString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }
