//go:build wasip1 && !tinygo.wasm

package abi

import (
	"unsafe"

	_ "github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm" // the SDK whose host calls this file implements
)

// The SDK passes Go ints (64-bit on wasm) for sizes and **byte / *int for out-parameters; the host ABI
// takes and writes 32-bit values. Out-parameters are therefore received in 32-bit locals (a pointer
// slot is received in an unsafe.Pointer whose high half stays zero) and then stored through the SDK's
// pointers by ordinary Go assignments, so the garbage collector sees every reference the host hands us.
//
// Every import that takes pointers is //go:noescape: the host reads and writes them only during the
// call and keeps none, which lets those locals live on the stack instead of costing two heap
// allocations per call.

//go:noescape
//go:wasmimport env proxy_log
func hostLog(level uint32, msg unsafe.Pointer, msgSize int32) uint32

//go:linkname ProxyLog github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/internal.ProxyLog
func ProxyLog(level uint32, msg *byte, msgSize int) uint32 {
	return hostLog(level, unsafe.Pointer(msg), int32(msgSize))
}

//go:noescape
//go:wasmimport env proxy_send_local_response
func hostSendLocalResponse(status uint32, details unsafe.Pointer, detailsSize int32, body unsafe.Pointer, bodySize int32,
	headers unsafe.Pointer, headersSize int32, grpcStatus int32) uint32

//go:linkname ProxySendLocalResponse github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/internal.ProxySendLocalResponse
func ProxySendLocalResponse(status uint32, details *byte, detailsSize int, body *byte, bodySize int,
	headers *byte, headersSize int, grpcStatus int32) uint32 {
	return hostSendLocalResponse(status, unsafe.Pointer(details), int32(detailsSize), unsafe.Pointer(body), int32(bodySize),
		unsafe.Pointer(headers), int32(headersSize), grpcStatus)
}

//go:noescape
//go:wasmimport env proxy_get_shared_data
func hostGetSharedData(key unsafe.Pointer, keySize int32, retData unsafe.Pointer, retSize unsafe.Pointer, retCas unsafe.Pointer) uint32

//go:linkname ProxyGetSharedData github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/internal.ProxyGetSharedData
func ProxyGetSharedData(key *byte, keySize int, retData **byte, retSize *int, retCas *uint32) uint32 {
	st := hostGetSharedData(unsafe.Pointer(key), int32(keySize), unsafe.Pointer(&out.data), unsafe.Pointer(&out.size), unsafe.Pointer(&out.cas))
	data, size, c := taken()
	*retData, *retSize, *retCas = (*byte)(data), int(size), c
	return st
}

//go:noescape
//go:wasmimport env proxy_set_shared_data
func hostSetSharedData(key unsafe.Pointer, keySize int32, value unsafe.Pointer, valueSize int32, cas uint32) uint32

//go:linkname ProxySetSharedData github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/internal.ProxySetSharedData
func ProxySetSharedData(key *byte, keySize int, value *byte, valueSize int, cas uint32) uint32 {
	return hostSetSharedData(unsafe.Pointer(key), int32(keySize), unsafe.Pointer(value), int32(valueSize), cas)
}

//go:noescape
//go:wasmimport env proxy_register_shared_queue
func hostRegisterSharedQueue(name unsafe.Pointer, nameSize int32, retID unsafe.Pointer) uint32

//go:linkname ProxyRegisterSharedQueue github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/internal.ProxyRegisterSharedQueue
func ProxyRegisterSharedQueue(name *byte, nameSize int, retID *uint32) uint32 {
	return hostRegisterSharedQueue(unsafe.Pointer(name), int32(nameSize), unsafe.Pointer(retID))
}

//go:noescape
//go:wasmimport env proxy_resolve_shared_queue
func hostResolveSharedQueue(vmID unsafe.Pointer, vmIDSize int32, name unsafe.Pointer, nameSize int32, retID unsafe.Pointer) uint32

//go:linkname ProxyResolveSharedQueue github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/internal.ProxyResolveSharedQueue
func ProxyResolveSharedQueue(vmID *byte, vmIDSize int, name *byte, nameSize int, retID *uint32) uint32 {
	return hostResolveSharedQueue(unsafe.Pointer(vmID), int32(vmIDSize), unsafe.Pointer(name), int32(nameSize), unsafe.Pointer(retID))
}

//go:noescape
//go:wasmimport env proxy_dequeue_shared_queue
func hostDequeueSharedQueue(queueID uint32, retData unsafe.Pointer, retSize unsafe.Pointer) uint32

//go:linkname ProxyDequeueSharedQueue github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/internal.ProxyDequeueSharedQueue
func ProxyDequeueSharedQueue(queueID uint32, retData **byte, retSize *int) uint32 {
	st := hostDequeueSharedQueue(queueID, unsafe.Pointer(&out.data), unsafe.Pointer(&out.size))
	data, size, _ := taken()
	*retData, *retSize = (*byte)(data), int(size)
	return st
}

//go:noescape
//go:wasmimport env proxy_enqueue_shared_queue
func hostEnqueueSharedQueue(queueID uint32, value unsafe.Pointer, valueSize int32) uint32

//go:linkname ProxyEnqueueSharedQueue github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/internal.ProxyEnqueueSharedQueue
func ProxyEnqueueSharedQueue(queueID uint32, value *byte, valueSize int) uint32 {
	return hostEnqueueSharedQueue(queueID, unsafe.Pointer(value), int32(valueSize))
}

//go:noescape
//go:wasmimport env proxy_get_header_map_value
func hostGetHeaderMapValue(mapType uint32, key unsafe.Pointer, keySize int32, retData unsafe.Pointer, retSize unsafe.Pointer) uint32

//go:linkname ProxyGetHeaderMapValue github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/internal.ProxyGetHeaderMapValue
func ProxyGetHeaderMapValue(mapType uint32, key *byte, keySize int, retData **byte, retSize *int) uint32 {
	st := hostGetHeaderMapValue(mapType, unsafe.Pointer(key), int32(keySize), unsafe.Pointer(&out.data), unsafe.Pointer(&out.size))
	data, size, _ := taken()
	*retData, *retSize = (*byte)(data), int(size)
	return st
}

//go:noescape
//go:wasmimport env proxy_add_header_map_value
func hostAddHeaderMapValue(mapType uint32, key unsafe.Pointer, keySize int32, value unsafe.Pointer, valueSize int32) uint32

//go:linkname ProxyAddHeaderMapValue github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/internal.ProxyAddHeaderMapValue
func ProxyAddHeaderMapValue(mapType uint32, key *byte, keySize int, value *byte, valueSize int) uint32 {
	return hostAddHeaderMapValue(mapType, unsafe.Pointer(key), int32(keySize), unsafe.Pointer(value), int32(valueSize))
}

//go:noescape
//go:wasmimport env proxy_replace_header_map_value
func hostReplaceHeaderMapValue(mapType uint32, key unsafe.Pointer, keySize int32, value unsafe.Pointer, valueSize int32) uint32

//go:linkname ProxyReplaceHeaderMapValue github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/internal.ProxyReplaceHeaderMapValue
func ProxyReplaceHeaderMapValue(mapType uint32, key *byte, keySize int, value *byte, valueSize int) uint32 {
	return hostReplaceHeaderMapValue(mapType, unsafe.Pointer(key), int32(keySize), unsafe.Pointer(value), int32(valueSize))
}

//go:noescape
//go:wasmimport env proxy_remove_header_map_value
func hostRemoveHeaderMapValue(mapType uint32, key unsafe.Pointer, keySize int32) uint32

//go:linkname ProxyRemoveHeaderMapValue github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/internal.ProxyRemoveHeaderMapValue
func ProxyRemoveHeaderMapValue(mapType uint32, key *byte, keySize int) uint32 {
	return hostRemoveHeaderMapValue(mapType, unsafe.Pointer(key), int32(keySize))
}

//go:noescape
//go:wasmimport env proxy_get_header_map_pairs
func hostGetHeaderMapPairs(mapType uint32, retData unsafe.Pointer, retSize unsafe.Pointer) uint32

//go:linkname ProxyGetHeaderMapPairs github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/internal.ProxyGetHeaderMapPairs
func ProxyGetHeaderMapPairs(mapType uint32, retData **byte, retSize *int) uint32 {
	st := hostGetHeaderMapPairs(mapType, unsafe.Pointer(&out.data), unsafe.Pointer(&out.size))
	data, size, _ := taken()
	*retData, *retSize = (*byte)(data), int(size)
	return st
}

//go:noescape
//go:wasmimport env proxy_set_header_map_pairs
func hostSetHeaderMapPairs(mapType uint32, pairs unsafe.Pointer, pairsSize int32) uint32

//go:linkname ProxySetHeaderMapPairs github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/internal.ProxySetHeaderMapPairs
func ProxySetHeaderMapPairs(mapType uint32, pairs *byte, pairsSize int) uint32 {
	return hostSetHeaderMapPairs(mapType, unsafe.Pointer(pairs), int32(pairsSize))
}

//go:noescape
//go:wasmimport env proxy_get_buffer_bytes
func hostGetBufferBytes(bufferType uint32, start int32, maxSize int32, retData unsafe.Pointer, retSize unsafe.Pointer) uint32

//go:linkname ProxyGetBufferBytes github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/internal.ProxyGetBufferBytes
func ProxyGetBufferBytes(bufferType uint32, start int, maxSize int, retData **byte, retSize *int) uint32 {
	st := hostGetBufferBytes(bufferType, int32(start), int32(maxSize), unsafe.Pointer(&out.data), unsafe.Pointer(&out.size))
	data, size, _ := taken()
	*retData, *retSize = (*byte)(data), int(size)
	return st
}

//go:noescape
//go:wasmimport env proxy_set_buffer_bytes
func hostSetBufferBytes(bufferType uint32, start int32, maxSize int32, data unsafe.Pointer, size int32) uint32

//go:linkname ProxySetBufferBytes github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/internal.ProxySetBufferBytes
func ProxySetBufferBytes(bufferType uint32, start int, maxSize int, data *byte, size int) uint32 {
	return hostSetBufferBytes(bufferType, int32(start), int32(maxSize), unsafe.Pointer(data), int32(size))
}

//go:wasmimport env proxy_continue_stream
func hostContinueStream(streamType uint32) uint32

//go:linkname ProxyContinueStream github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/internal.ProxyContinueStream
func ProxyContinueStream(streamType uint32) uint32 { return hostContinueStream(streamType) }

//go:wasmimport env proxy_close_stream
func hostCloseStream(streamType uint32) uint32

//go:linkname ProxyCloseStream github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/internal.ProxyCloseStream
func ProxyCloseStream(streamType uint32) uint32 { return hostCloseStream(streamType) }

//go:noescape
//go:wasmimport env proxy_http_call
func hostHTTPCall(upstream unsafe.Pointer, upstreamSize int32, headers unsafe.Pointer, headersSize int32,
	body unsafe.Pointer, bodySize int32, trailers unsafe.Pointer, trailersSize int32, timeoutMs uint32, retCalloutID unsafe.Pointer) uint32

//go:linkname ProxyHttpCall github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/internal.ProxyHttpCall
func ProxyHttpCall(upstream *byte, upstreamSize int, headers *byte, headersSize int,
	body *byte, bodySize int, trailers *byte, trailersSize int, timeoutMs uint32, retCalloutID *uint32) uint32 {
	return hostHTTPCall(unsafe.Pointer(upstream), int32(upstreamSize), unsafe.Pointer(headers), int32(headersSize),
		unsafe.Pointer(body), int32(bodySize), unsafe.Pointer(trailers), int32(trailersSize), timeoutMs, unsafe.Pointer(retCalloutID))
}

//go:noescape
//go:wasmimport env proxy_call_foreign_function
func hostCallForeignFunction(name unsafe.Pointer, nameSize int32, param unsafe.Pointer, paramSize int32, retData unsafe.Pointer, retSize unsafe.Pointer) uint32

//go:linkname ProxyCallForeignFunction github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/internal.ProxyCallForeignFunction
func ProxyCallForeignFunction(name *byte, nameSize int, param *byte, paramSize int, retData **byte, retSize *int) uint32 {
	st := hostCallForeignFunction(unsafe.Pointer(name), int32(nameSize), unsafe.Pointer(param), int32(paramSize), unsafe.Pointer(&out.data), unsafe.Pointer(&out.size))
	data, size, _ := taken()
	*retData, *retSize = (*byte)(data), int(size)
	return st
}

//go:wasmimport env proxy_set_tick_period_milliseconds
func hostSetTickPeriodMilliseconds(period uint32) uint32

//go:linkname ProxySetTickPeriodMilliseconds github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/internal.ProxySetTickPeriodMilliseconds
func ProxySetTickPeriodMilliseconds(period uint32) uint32 {
	return hostSetTickPeriodMilliseconds(period)
}

//go:wasmimport env proxy_set_effective_context
func hostSetEffectiveContext(contextID uint32) uint32

//go:linkname ProxySetEffectiveContext github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/internal.ProxySetEffectiveContext
func ProxySetEffectiveContext(contextID uint32) uint32 { return hostSetEffectiveContext(contextID) }

//go:wasmimport env proxy_done
func hostDone() uint32

//go:linkname ProxyDone github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/internal.ProxyDone
func ProxyDone() uint32 { return hostDone() }

//go:noescape
//go:wasmimport env proxy_define_metric
func hostDefineMetric(metricType uint32, name unsafe.Pointer, nameSize int32, retID unsafe.Pointer) uint32

//go:linkname ProxyDefineMetric github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/internal.ProxyDefineMetric
func ProxyDefineMetric(metricType uint32, name *byte, nameSize int, retID *uint32) uint32 {
	return hostDefineMetric(metricType, unsafe.Pointer(name), int32(nameSize), unsafe.Pointer(retID))
}

//go:wasmimport env proxy_increment_metric
func hostIncrementMetric(metricID uint32, offset int64) uint32

//go:linkname ProxyIncrementMetric github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/internal.ProxyIncrementMetric
func ProxyIncrementMetric(metricID uint32, offset int64) uint32 {
	return hostIncrementMetric(metricID, offset)
}

//go:wasmimport env proxy_record_metric
func hostRecordMetric(metricID uint32, value uint64) uint32

//go:linkname ProxyRecordMetric github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/internal.ProxyRecordMetric
func ProxyRecordMetric(metricID uint32, value uint64) uint32 {
	return hostRecordMetric(metricID, value)
}

//go:noescape
//go:wasmimport env proxy_get_metric
func hostGetMetric(metricID uint32, retValue unsafe.Pointer) uint32

//go:linkname ProxyGetMetric github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/internal.ProxyGetMetric
func ProxyGetMetric(metricID uint32, retValue *uint64) uint32 {
	return hostGetMetric(metricID, unsafe.Pointer(retValue))
}

//go:noescape
//go:wasmimport env proxy_get_property
func hostGetProperty(path unsafe.Pointer, pathSize int32, retData unsafe.Pointer, retSize unsafe.Pointer) uint32

//go:linkname ProxyGetProperty github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/internal.ProxyGetProperty
func ProxyGetProperty(path *byte, pathSize int, retData **byte, retSize *int) uint32 {
	st := hostGetProperty(unsafe.Pointer(path), int32(pathSize), unsafe.Pointer(&out.data), unsafe.Pointer(&out.size))
	data, size, _ := taken()
	*retData, *retSize = (*byte)(data), int(size)
	return st
}

//go:noescape
//go:wasmimport env proxy_set_property
func hostSetProperty(path unsafe.Pointer, pathSize int32, value unsafe.Pointer, valueSize int32) uint32

//go:linkname ProxySetProperty github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/internal.ProxySetProperty
func ProxySetProperty(path *byte, pathSize int, value *byte, valueSize int) uint32 {
	return hostSetProperty(unsafe.Pointer(path), int32(pathSize), unsafe.Pointer(value), int32(valueSize))
}
