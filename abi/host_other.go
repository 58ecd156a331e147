//go:build !wasip1 || tinygo.wasm

package abi

import (
	"errors"
	"strings"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

// Outside a wasip1 build by the standard compiler (native tests on the SDK's emulator, TinyGo) the
// reads go through the SDK's own functions, which allocate; the results are the same.

// GetProperty reads the property at path (encoded with PropertyPath), into buf when it fits.
func GetProperty(path, buf []byte) ([]byte, Status) {
	v, err := proxywasm.GetProperty(strings.Split(string(path), "\x00"))
	if err != nil {
		return buf[:0], statusOf(err)
	}
	return append(buf[:0], v...), StatusOK
}

// GetSharedData reads key's value and cas from the host's shared data, into buf when it fits.
func GetSharedData(key string, buf []byte) ([]byte, uint32, Status) {
	v, cas, err := proxywasm.GetSharedData(key)
	if err != nil {
		return buf[:0], 0, statusOf(err)
	}
	return append(buf[:0], v...), cas, StatusOK
}

// GetHeader reads the first value of the header name in the map m of the current stream, into buf.
func GetHeader(m MapType, name string, buf []byte) ([]byte, Status) {
	var v string
	var err error
	switch m {
	case RequestHeaders:
		v, err = proxywasm.GetHttpRequestHeader(name)
	case ResponseHeaders:
		v, err = proxywasm.GetHttpResponseHeader(name)
	default:
		return buf[:0], StatusBadArgument
	}
	if err != nil {
		return buf[:0], statusOf(err)
	}
	return append(buf[:0], v...), StatusOK
}

// SetProperty writes value at path (encoded with PropertyPath).
func SetProperty(path, value []byte) Status {
	return statusOf(proxywasm.SetProperty(strings.Split(string(path), "\x00"), value))
}

// SetSharedData writes value under key with compare-and-swap cas (0: unconditional).
func SetSharedData(key string, value []byte, cas uint32) Status {
	return statusOf(proxywasm.SetSharedData(key, value, cas))
}

// AddHeader adds a header to the map m of the current stream.
func AddHeader(m MapType, name string, value []byte) Status {
	switch m {
	case RequestHeaders:
		return statusOf(proxywasm.AddHttpRequestHeader(name, string(value)))
	case ResponseHeaders:
		return statusOf(proxywasm.AddHttpResponseHeader(name, string(value)))
	}
	return StatusBadArgument
}

// SendLocalResponse asks the host to answer the current stream locally once the callback returns.
func SendLocalResponse(status uint32, headers [][2]string, body []byte, grpcStatus int32, buf []byte) ([]byte, Status) {
	return buf[:0], statusOf(proxywasm.SendHttpResponse(status, headers, body, grpcStatus))
}

func statusOf(err error) Status {
	switch {
	case err == nil:
		return StatusOK
	case errors.Is(err, types.ErrorStatusNotFound):
		return StatusNotFound
	case errors.Is(err, types.ErrorStatusCasMismatch):
		return StatusCasMismatch
	case errors.Is(err, types.ErrorStatusBadArgument):
		return StatusBadArgument
	}
	return 10 // InternalFailure
}

// CloseStream resets the current HTTP stream. The SDK has no call for it on an HTTP context (its
// CloseDownstream passes the TCP stream type), so outside wasip1 it is not implemented.
func CloseStream() Status { return 12 } // Unimplemented

// GetBody reads size bytes from start of the current stream's request body (t 0) or response body
// (t 1) into buf.
func GetBody(t uint32, start, size int, buf []byte) ([]byte, Status) {
	var v []byte
	var err error
	if t == 1 {
		v, err = proxywasm.GetHttpResponseBody(start, size)
	} else {
		v, err = proxywasm.GetHttpRequestBody(start, size)
	}
	if err != nil {
		return buf[:0], statusOf(err)
	}
	return append(buf[:0], v...), StatusOK
}
