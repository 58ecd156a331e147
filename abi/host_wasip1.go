//go:build wasip1 && !tinygo.wasm

package abi

import "unsafe"

// recv is where the host's next re-entry into the allocator puts its result when it fits: a host call
// that returns data sets it just before the call and clears it after, so the value lands in the
// caller's reused buffer instead of fresh memory (see the package contract: one allocation per host
// call, only for that call's result).
var recv []byte

// out holds the out-parameters of the host call that returns data. The host writes them after it
// re-entered the guest's allocator (proxy_on_memory_allocate), which runs on the calling goroutine's
// stack and may grow it: Go then copies the stack elsewhere, and an out-parameter on the stack would
// be written at its old address (the call would seem to return nothing, or a value a moved frame no
// longer holds). So they live here, off every stack: a VM makes one host call at a time, and the
// allocator makes none.
var out struct {
	data      unsafe.Pointer
	size, cas uint32
}

// taken returns the out-parameters of the host call just made, and clears them for the next.
func taken() (data unsafe.Pointer, size, cas uint32) {
	data, size, cas = out.data, out.size, out.cas
	out.data, out.size, out.cas = nil, 0, 0
	return data, size, cas
}

// receive is the allocator's side of recv: the start of recv when size fits, else nil (then the SDK's
// allocator hands out fresh memory).
func receive(size uint32) unsafe.Pointer {
	b := recv
	recv = nil
	if cap(b) == 0 || int(size) > cap(b) {
		return nil
	}
	return unsafe.Pointer(unsafe.SliceData(b))
}

// received turns what the host wrote back into a slice: buf[:size] when the host filled buf, else a
// view of the fresh memory the allocator handed out.
func received(buf []byte, data unsafe.Pointer, size uint32) []byte {
	switch {
	case data == nil || size == 0:
		return buf[:0]
	case cap(buf) > 0 && data == unsafe.Pointer(unsafe.SliceData(buf)):
		return buf[:size]
	}
	return unsafe.Slice((*byte)(data), size)
}

// GetProperty reads the property at path (encoded with PropertyPath) into buf's memory when it fits,
// else into fresh memory, and returns it. It allocates nothing when buf is large enough; pass the
// returned slice back as buf next time. The value is overwritten by the next read into the same buf.
func GetProperty(path, buf []byte) ([]byte, Status) {
	recv = buf[:cap(buf)]
	st := hostGetProperty(unsafe.Pointer(unsafe.SliceData(path)), int32(len(path)), unsafe.Pointer(&out.data), unsafe.Pointer(&out.size))
	recv = nil
	data, size, _ := taken()
	if st != 0 {
		return buf[:0], Status(st)
	}
	return received(buf, data, size), StatusOK
}

// GetSharedData reads key's value and cas from the host's shared data, into buf's memory when it
// fits (see GetProperty).
func GetSharedData(key string, buf []byte) ([]byte, uint32, Status) {
	recv = buf[:cap(buf)]
	st := hostGetSharedData(unsafe.Pointer(unsafe.StringData(key)), int32(len(key)), unsafe.Pointer(&out.data), unsafe.Pointer(&out.size), unsafe.Pointer(&out.cas))
	recv = nil
	data, size, cas := taken()
	if st != 0 {
		return buf[:0], 0, Status(st)
	}
	return received(buf, data, size), cas, StatusOK
}

// GetHeader reads the first value of the header name in the map m of the current stream, into buf's
// memory when it fits (see GetProperty).
func GetHeader(m MapType, name string, buf []byte) ([]byte, Status) {
	recv = buf[:cap(buf)]
	st := hostGetHeaderMapValue(uint32(m), unsafe.Pointer(unsafe.StringData(name)), int32(len(name)), unsafe.Pointer(&out.data), unsafe.Pointer(&out.size))
	recv = nil
	data, size, _ := taken()
	if st != 0 {
		return buf[:0], Status(st)
	}
	return received(buf, data, size), StatusOK
}

// SetProperty writes value at path (encoded with PropertyPath); the host copies both. It allocates
// nothing: encode a fixed path once and pass it on every request.
func SetProperty(path, value []byte) Status {
	return Status(hostSetProperty(unsafe.Pointer(unsafe.SliceData(path)), int32(len(path)), unsafe.Pointer(unsafe.SliceData(value)), int32(len(value))))
}

// SetSharedData writes value under key with compare-and-swap cas (0: unconditional).
func SetSharedData(key string, value []byte, cas uint32) Status {
	return Status(hostSetSharedData(unsafe.Pointer(unsafe.StringData(key)), int32(len(key)), unsafe.Pointer(unsafe.SliceData(value)), int32(len(value)), cas))
}

// AddHeader adds a header to the map m of the current stream; the host copies name and value.
func AddHeader(m MapType, name string, value []byte) Status {
	return Status(hostAddHeaderMapValue(uint32(m), unsafe.Pointer(unsafe.StringData(name)), int32(len(name)), unsafe.Pointer(unsafe.SliceData(value)), int32(len(value))))
}

// SendLocalResponse asks the host to answer the current stream with status, headers, body and gRPC
// status (-1: not gRPC), once the callback returns. The headers are serialized into buf, which is
// returned for reuse: no allocation once it is large enough.
func SendLocalResponse(status uint32, headers [][2]string, body []byte, grpcStatus int32, buf []byte) ([]byte, Status) {
	buf = AppendHeaderMap(buf[:0], headers)
	st := hostSendLocalResponse(status, nil, 0, unsafe.Pointer(unsafe.SliceData(body)), int32(len(body)),
		unsafe.Pointer(unsafe.SliceData(buf)), int32(len(buf)), grpcStatus)
	return buf, Status(st)
}

// CloseStream resets the current HTTP stream once the callback returns (proxy_close_stream with
// the request stream type, which Envoy maps to a reset of the whole stream; docs/envoy-host.md §13).
func CloseStream() Status { return Status(hostCloseStream(0)) }

// GetBody reads size bytes from start of the current stream's request body (t 0) or response body
// (t 1), as proxy_get_buffer_bytes hands them (the chunk of this callback, or all the body held),
// into buf's memory when it fits (see GetProperty).
func GetBody(t uint32, start, size int, buf []byte) ([]byte, Status) {
	recv = buf[:cap(buf)]
	st := hostGetBufferBytes(t, int32(start), int32(size), unsafe.Pointer(&out.data), unsafe.Pointer(&out.size))
	recv = nil
	data, n, _ := taken()
	if st != 0 {
		return buf[:0], Status(st)
	}
	return received(buf, data, n), StatusOK
}
