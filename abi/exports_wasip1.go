//go:build wasip1 && !tinygo.wasm

package abi

import "unsafe"

// Each callback below is exported under its proxy-wasm name and forwards to the SDK's unexported
// implementation. Wasm passes every Word as i32; the SDK takes Go ints and bools, so arguments are
// widened here and booleans travel as 0 or 1.

func boolWord(b bool) uint32 {
	if b {
		return 1
	}
	return 0
}

//go:linkname sdkABIVersion github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/internal.proxyABIVersion
func sdkABIVersion()

// proxyABIVersion marks the module as proxy-wasm ABI 0.2.0, the version the SDK implements. Envoy reads
// the ABI version from the name of this export.
//
//go:wasmexport proxy_abi_version_0_2_0
func proxyABIVersion() { sdkABIVersion() }

//go:linkname sdkOnMemoryAllocate github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/internal.proxyOnMemoryAllocate
func sdkOnMemoryAllocate(size uint) *byte

// proxyOnMemoryAllocate is where the host puts what a host call returns: into the caller's reused
// buffer when the call asked for it and the value fits (see GetProperty), else into fresh memory from
// the SDK's allocator.
//
//go:wasmexport proxy_on_memory_allocate
func proxyOnMemoryAllocate(size uint32) unsafe.Pointer {
	if p := receive(size); p != nil {
		return p
	}
	return unsafe.Pointer(sdkOnMemoryAllocate(uint(size)))
}

//go:linkname sdkOnVMStart github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/internal.proxyOnVMStart
func sdkOnVMStart(rootContextID uint32, vmConfigurationSize int) bool

//go:wasmexport proxy_on_vm_start
func proxyOnVMStart(rootContextID uint32, vmConfigurationSize uint32) uint32 {
	return boolWord(sdkOnVMStart(rootContextID, int(vmConfigurationSize)))
}

//go:linkname sdkOnConfigure github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/internal.proxyOnConfigure
func sdkOnConfigure(rootContextID uint32, pluginConfigurationSize int) bool

//go:wasmexport proxy_on_configure
func proxyOnConfigure(rootContextID uint32, pluginConfigurationSize uint32) uint32 {
	return boolWord(sdkOnConfigure(rootContextID, int(pluginConfigurationSize)))
}

//go:linkname sdkOnNewConnection github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/internal.proxyOnNewConnection
func sdkOnNewConnection(contextID uint32) uint32

//go:wasmexport proxy_on_new_connection
func proxyOnNewConnection(contextID uint32) uint32 { return sdkOnNewConnection(contextID) }

//go:linkname sdkOnDownstreamData github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/internal.proxyOnDownstreamData
func sdkOnDownstreamData(contextID uint32, dataSize int, endOfStream bool) uint32

//go:wasmexport proxy_on_downstream_data
func proxyOnDownstreamData(contextID uint32, dataSize uint32, endOfStream uint32) uint32 {
	return sdkOnDownstreamData(contextID, int(dataSize), endOfStream != 0)
}

//go:linkname sdkOnDownstreamConnectionClose github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/internal.proxyOnDownstreamConnectionClose
func sdkOnDownstreamConnectionClose(contextID uint32, peerType uint32)

//go:wasmexport proxy_on_downstream_connection_close
func proxyOnDownstreamConnectionClose(contextID uint32, peerType uint32) {
	sdkOnDownstreamConnectionClose(contextID, peerType)
}

//go:linkname sdkOnUpstreamData github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/internal.proxyOnUpstreamData
func sdkOnUpstreamData(contextID uint32, dataSize int, endOfStream bool) uint32

//go:wasmexport proxy_on_upstream_data
func proxyOnUpstreamData(contextID uint32, dataSize uint32, endOfStream uint32) uint32 {
	return sdkOnUpstreamData(contextID, int(dataSize), endOfStream != 0)
}

//go:linkname sdkOnUpstreamConnectionClose github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/internal.proxyOnUpstreamConnectionClose
func sdkOnUpstreamConnectionClose(contextID uint32, peerType uint32)

//go:wasmexport proxy_on_upstream_connection_close
func proxyOnUpstreamConnectionClose(contextID uint32, peerType uint32) {
	sdkOnUpstreamConnectionClose(contextID, peerType)
}

//go:linkname sdkOnRequestHeaders github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/internal.proxyOnRequestHeaders
func sdkOnRequestHeaders(contextID uint32, numHeaders int, endOfStream bool) uint32

//go:wasmexport proxy_on_request_headers
func proxyOnRequestHeaders(contextID uint32, numHeaders uint32, endOfStream uint32) uint32 {
	return sdkOnRequestHeaders(contextID, int(numHeaders), endOfStream != 0)
}

//go:linkname sdkOnRequestBody github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/internal.proxyOnRequestBody
func sdkOnRequestBody(contextID uint32, bodySize int, endOfStream bool) uint32

//go:wasmexport proxy_on_request_body
func proxyOnRequestBody(contextID uint32, bodySize uint32, endOfStream uint32) uint32 {
	return sdkOnRequestBody(contextID, int(bodySize), endOfStream != 0)
}

//go:linkname sdkOnRequestTrailers github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/internal.proxyOnRequestTrailers
func sdkOnRequestTrailers(contextID uint32, numTrailers int) uint32

//go:wasmexport proxy_on_request_trailers
func proxyOnRequestTrailers(contextID uint32, numTrailers uint32) uint32 {
	return sdkOnRequestTrailers(contextID, int(numTrailers))
}

//go:linkname sdkOnResponseHeaders github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/internal.proxyOnResponseHeaders
func sdkOnResponseHeaders(contextID uint32, numHeaders int, endOfStream bool) uint32

//go:wasmexport proxy_on_response_headers
func proxyOnResponseHeaders(contextID uint32, numHeaders uint32, endOfStream uint32) uint32 {
	return sdkOnResponseHeaders(contextID, int(numHeaders), endOfStream != 0)
}

//go:linkname sdkOnResponseBody github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/internal.proxyOnResponseBody
func sdkOnResponseBody(contextID uint32, bodySize int, endOfStream bool) uint32

//go:wasmexport proxy_on_response_body
func proxyOnResponseBody(contextID uint32, bodySize uint32, endOfStream uint32) uint32 {
	return sdkOnResponseBody(contextID, int(bodySize), endOfStream != 0)
}

//go:linkname sdkOnResponseTrailers github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/internal.proxyOnResponseTrailers
func sdkOnResponseTrailers(contextID uint32, numTrailers int) uint32

//go:wasmexport proxy_on_response_trailers
func proxyOnResponseTrailers(contextID uint32, numTrailers uint32) uint32 {
	return sdkOnResponseTrailers(contextID, int(numTrailers))
}

//go:linkname sdkOnHTTPCallResponse github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/internal.proxyOnHttpCallResponse
func sdkOnHTTPCallResponse(rootContextID, calloutID uint32, numHeaders, bodySize, numTrailers int)

//go:wasmexport proxy_on_http_call_response
func proxyOnHTTPCallResponse(rootContextID, calloutID uint32, numHeaders, bodySize, numTrailers uint32) {
	sdkOnHTTPCallResponse(rootContextID, calloutID, int(numHeaders), int(bodySize), int(numTrailers))
}

//go:linkname sdkOnContextCreate github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/internal.proxyOnContextCreate
func sdkOnContextCreate(contextID uint32, rootContextID uint32)

//go:wasmexport proxy_on_context_create
func proxyOnContextCreate(contextID uint32, rootContextID uint32) {
	sdkOnContextCreate(contextID, rootContextID)
}

//go:linkname sdkOnLog github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/internal.proxyOnLog
func sdkOnLog(contextID uint32)

//go:wasmexport proxy_on_log
func proxyOnLog(contextID uint32) { sdkOnLog(contextID) }

//go:linkname sdkOnDone github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/internal.proxyOnDone
func sdkOnDone(contextID uint32) bool

//go:wasmexport proxy_on_done
func proxyOnDone(contextID uint32) uint32 { return boolWord(sdkOnDone(contextID)) }

//go:linkname sdkOnDelete github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/internal.proxyOnDelete
func sdkOnDelete(contextID uint32)

//go:wasmexport proxy_on_delete
func proxyOnDelete(contextID uint32) { sdkOnDelete(contextID) }

//go:linkname sdkOnQueueReady github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/internal.proxyOnQueueReady
func sdkOnQueueReady(rootContextID, queueID uint32)

//go:wasmexport proxy_on_queue_ready
func proxyOnQueueReady(rootContextID, queueID uint32) { sdkOnQueueReady(rootContextID, queueID) }

//go:linkname sdkOnTick github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/internal.proxyOnTick
func sdkOnTick(rootContextID uint32)

//go:wasmexport proxy_on_tick
func proxyOnTick(rootContextID uint32) { sdkOnTick(rootContextID) }
