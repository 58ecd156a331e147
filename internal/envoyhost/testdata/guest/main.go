//go:build wasip1

// Command guest is the host tests' proxy-wasm module. It uses the raw ABI (no SDK)
// so that each host function is exercised exactly as a test asks. A request's x-op
// header selects an operation; most operations answer with a local reply whose
// headers carry the results.
package main

import (
	"encoding/binary"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"
)

func main() {}

//go:wasmimport env proxy_log
func proxyLog(level uint32, ptr unsafe.Pointer, size uint32) uint32

//go:wasmimport env proxy_get_shared_data
func proxyGetSharedData(kPtr unsafe.Pointer, kSize uint32, vPtr, vSize, cas unsafe.Pointer) uint32

//go:wasmimport env proxy_set_shared_data
func proxySetSharedData(kPtr unsafe.Pointer, kSize uint32, vPtr unsafe.Pointer, vSize uint32, cas uint32) uint32

//go:wasmimport env proxy_get_header_map_value
func proxyGetHeaderMapValue(typ uint32, kPtr unsafe.Pointer, kSize uint32, vPtr, vSize unsafe.Pointer) uint32

//go:wasmimport env proxy_add_header_map_value
func proxyAddHeaderMapValue(typ uint32, kPtr unsafe.Pointer, kSize uint32, vPtr unsafe.Pointer, vSize uint32) uint32

//go:wasmimport env proxy_get_buffer_bytes
func proxyGetBufferBytes(typ, start, length uint32, ptr, size unsafe.Pointer) uint32

//go:wasmimport env proxy_send_local_response
func proxySendLocalResponse(status uint32, dPtr unsafe.Pointer, dSize uint32, bPtr unsafe.Pointer, bSize uint32, hPtr unsafe.Pointer, hSize uint32, grpc int32) uint32

//go:wasmimport env proxy_http_call
func proxyHTTPCall(cPtr unsafe.Pointer, cSize uint32, hPtr unsafe.Pointer, hSize uint32, bPtr unsafe.Pointer, bSize uint32, tPtr unsafe.Pointer, tSize uint32, timeout uint32, token unsafe.Pointer) uint32

//go:wasmimport env proxy_set_effective_context
func proxySetEffectiveContext(id uint32) uint32

//go:wasmimport env proxy_continue_stream
func proxyContinueStream(dir uint32) uint32

//go:wasmimport env proxy_get_status
func proxyGetStatus(code, ptr, size unsafe.Pointer) uint32

//go:wasmimport env proxy_get_property
func proxyGetProperty(pPtr unsafe.Pointer, pSize uint32, vPtr, vSize unsafe.Pointer) uint32

//go:wasmimport env proxy_set_property
func proxySetProperty(pPtr unsafe.Pointer, pSize uint32, vPtr unsafe.Pointer, vSize uint32) uint32

//go:wasmimport env proxy_set_tick_period_milliseconds
func proxySetTickPeriod(ms uint32) uint32

//go:wasmimport env proxy_define_metric
func proxyDefineMetric(typ uint32, nPtr unsafe.Pointer, nSize uint32, id unsafe.Pointer) uint32

//go:wasmimport env proxy_increment_metric
func proxyIncrementMetric(id uint32, by int64) uint32

//go:wasmimport env proxy_register_shared_queue
func proxyRegisterSharedQueue(nPtr unsafe.Pointer, nSize uint32, id unsafe.Pointer) uint32

//go:wasmimport env proxy_resolve_shared_queue
func proxyResolveSharedQueue(vPtr unsafe.Pointer, vSize uint32, nPtr unsafe.Pointer, nSize uint32, id unsafe.Pointer) uint32

//go:wasmimport env proxy_enqueue_shared_queue
func proxyEnqueueSharedQueue(id uint32, ptr unsafe.Pointer, size uint32) uint32

//go:wasmimport env proxy_dequeue_shared_queue
func proxyDequeueSharedQueue(id uint32, ptr, size unsafe.Pointer) uint32

//go:wasmimport wasi_snapshot_preview1 poll_oneoff
func pollOneoff(in, out unsafe.Pointer, nsubs uint32, nevents unsafe.Pointer) uint32

// ptrOf returns the address of s's bytes (nil for an empty string).
func ptrOf(s string) unsafe.Pointer { return unsafe.Pointer(unsafe.StringData(s)) }

func logf(level uint32, msg string) { proxyLog(level, ptrOf(msg), uint32(len(msg))) }

// bytesAt turns a host-allocated (ptr, size) into a slice.
func bytesAt(ptr, size uint32) []byte {
	if size == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(uintptr(ptr))), size)
}

// lastAlloc keeps the latest host allocation reachable until the next one.
var (
	lastAlloc    []byte
	mallocCallsX bool // the next allocation makes a host call outside the malloc allow-list
)

//go:wasmexport proxy_on_memory_allocate
func onMemoryAllocate(size uint32) uint32 {
	if mallocCallsX {
		mallocCallsX = false
		getShared("anything")
	}
	lastAlloc = make([]byte, size)
	return uint32(uintptr(unsafe.Pointer(&lastAlloc[0])))
}

//go:wasmexport proxy_abi_version_0_2_0
func abiVersion() {}

func init() {
	switch v, _ := syscall.Getenv("GUEST_INIT"); v {
	case "shared_get":
		getShared("k")
	case "poll":
		pollOnce(1)
	}
}

func getShared(key string) (st uint32, val []byte, cas uint32) {
	var ptr, size uint32
	st = proxyGetSharedData(ptrOf(key), uint32(len(key)), unsafe.Pointer(&ptr), unsafe.Pointer(&size), unsafe.Pointer(&cas))
	return st, bytesAt(ptr, size), cas
}

func setShared(key string, val []byte, cas uint32) uint32 {
	var p unsafe.Pointer
	if len(val) > 0 {
		p = unsafe.Pointer(&val[0])
	}
	return proxySetSharedData(ptrOf(key), uint32(len(key)), p, uint32(len(val)), cas)
}

// pollOnce calls poll_oneoff with one relative clock subscription of ms.
func pollOnce(ms uint64) uint32 {
	var sub [48]byte
	sub[8] = 0                                                           // clock
	binary.LittleEndian.PutUint32(sub[16:], 1)                           // monotonic
	binary.LittleEndian.PutUint64(sub[24:], ms*uint64(time.Millisecond)) // timeout
	var ev [32]byte
	var n uint32
	return pollOneoff(unsafe.Pointer(&sub[0]), unsafe.Pointer(&ev[0]), 1, unsafe.Pointer(&n))
}

func header(typ uint32, name string) (string, bool) {
	var ptr, size uint32
	if proxyGetHeaderMapValue(typ, ptrOf(name), uint32(len(name)), unsafe.Pointer(&ptr), unsafe.Pointer(&size)) != 0 {
		return "", false
	}
	return string(bytesAt(ptr, size)), true
}

func addHeader(typ uint32, name, value string) uint32 {
	return proxyAddHeaderMapValue(typ, ptrOf(name), uint32(len(name)), ptrOf(value), uint32(len(value)))
}

func buffer(typ, size uint32) (uint32, []byte) {
	var ptr, n uint32
	st := proxyGetBufferBytes(typ, 0, size, unsafe.Pointer(&ptr), unsafe.Pointer(&n))
	return st, bytesAt(ptr, n)
}

func pairs(kv ...string) []byte {
	n := len(kv) / 2
	b := binary.LittleEndian.AppendUint32(nil, uint32(n))
	for i := 0; i < n; i++ {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(kv[2*i])))
		b = binary.LittleEndian.AppendUint32(b, uint32(len(kv[2*i+1])))
	}
	for _, s := range kv {
		b = append(b, s...)
		b = append(b, 0)
	}
	return b
}

func reply(status uint32, body string, kv ...string) uint32 {
	h := pairs(kv...)
	d := "guest reply"
	return proxySendLocalResponse(status, ptrOf(d), uint32(len(d)), ptrOf(body), uint32(len(body)),
		unsafe.Pointer(&h[0]), uint32(len(h)), -1)
}

func itoa(n uint32) string { return strconv.FormatUint(uint64(n), 10) }

var metricIDs = map[string]uint32{}

func incMetric(name string, by int64) uint32 {
	id, ok := metricIDs[name]
	if !ok {
		if st := proxyDefineMetric(0, ptrOf(name), uint32(len(name)), unsafe.Pointer(&id)); st != 0 {
			return st
		}
		metricIDs[name] = id
	}
	return proxyIncrementMetric(id, by)
}

func property(path string) (uint32, []byte) {
	var ptr, size uint32
	st := proxyGetProperty(ptrOf(path), uint32(len(path)), unsafe.Pointer(&ptr), unsafe.Pointer(&size))
	return st, bytesAt(ptr, size)
}

var (
	rootID  uint32
	held    [][]byte
	pending = map[uint32]callout{} // token → stream
)

type callout struct {
	stream uint32
	mode   string
}

//go:wasmexport proxy_on_context_create
func onContextCreate(id, root uint32) {
	if root == 0 {
		rootID = id
		return
	}
	incMetric("streams_created", 1)
}

//go:wasmexport proxy_on_vm_start
func onVMStart(root, size uint32) uint32 {
	logf(2, "vm_start root="+itoa(root)+" size="+itoa(size))
	return 1
}

//go:wasmexport proxy_on_configure
func onConfigure(root, size uint32) uint32 {
	st, cfg := buffer(7, size)
	pst, _ := property("request\x00path")
	logf(2, "configure root="+itoa(root)+" status="+itoa(st)+" config="+string(cfg)+" request_path_status="+itoa(pst))
	for _, tok := range strings.Fields(string(cfg)) {
		k, v, _ := strings.Cut(tok, "=")
		switch k {
		case "fail":
			return 0
		case "tick":
			n, _ := strconv.Atoi(v)
			proxySetTickPeriod(uint32(n))
		case "count":
			incr(v)
		}
	}
	return 1
}

// incr adds 1 to the uint64 under key with a bounded CAS loop and returns the attempts.
func incr(key string) (attempts int, st uint32) {
	for attempts = 1; attempts <= 1000; attempts++ {
		gst, val, cas := getShared(key)
		var n uint64
		if gst == 0 && len(val) == 8 {
			n = binary.LittleEndian.Uint64(val)
		}
		next := binary.LittleEndian.AppendUint64(nil, n+1)
		if gst != 0 {
			cas = 0
		}
		if st = setShared(key, next, cas); st != 8 {
			return attempts, st
		}
	}
	return attempts, 8
}

//go:wasmexport proxy_on_tick
func onTick(root uint32) {
	logf(2, "tick")
	incMetric("ticks", 1)
	for _, id := range heldResponses {
		if proxySetEffectiveContext(id) == 0 {
			proxyContinueStream(1)
		}
	}
	heldResponses = heldResponses[:0]
	releaseHeld()
}

//go:wasmexport proxy_on_request_headers
func onRequestHeaders(id, n, eos uint32) uint32 {
	op, _ := header(0, "x-op")
	get := func(name string) string { v, _ := header(0, name); return v }
	switch op {
	case "":
		addHeader(0, "x-guest", itoa(id))
		return 0
	case "buffer":
		buffering[id] = true
		return 0
	case "buffer_response":
		bufferingResponse[id] = true
		return 0
	case "pause_response":
		pauseResponse[id] = true
		return 0
	case "stream":
		startStream(id, get)
		return 0
	case "get":
		ptr, size, cas := uint32(0xdeadbeef), uint32(0xdeadbeef), uint32(0xdeadbeef)
		key := get("x-key")
		st := proxyGetSharedData(ptrOf(key), uint32(len(key)), unsafe.Pointer(&ptr), unsafe.Pointer(&size), unsafe.Pointer(&cas))
		untouched := ptr == 0xdeadbeef && size == 0xdeadbeef && cas == 0xdeadbeef
		val := ""
		if st == 0 {
			val = string(bytesAt(ptr, size))
		}
		reply(200, "", "x-status", itoa(st), "x-cas", itoa(cas), "x-ptr", itoa(ptr), "x-size", itoa(size),
			"x-value", val, "x-untouched", strconv.FormatBool(untouched))
	case "set":
		cas, _ := strconv.ParseUint(get("x-cas"), 10, 32)
		st := setShared(get("x-key"), []byte(get("x-value")), uint32(cas))
		reply(200, "", "x-status", itoa(st))
	case "incr":
		attempts, st := incr(get("x-key"))
		reply(200, "", "x-status", itoa(st), "x-attempts", strconv.Itoa(attempts))
	case "reply":
		code, _ := strconv.Atoi(get("x-code"))
		reply(uint32(code), "denied", "x-reason", "test")
		if addHeader(0, "x-after", "1") == 0 {
			incMetric("after_reply_ok", 1)
		}
		if reply(500, "second") == 2 {
			incMetric("second_reply_bad_argument", 1)
		}
		return 0 // the host must force stop
	case "httpcall":
		return dispatch(id, get)
	case "poll":
		reply(200, "", "x-errno", itoa(pollOnce(1)))
	case "sleep":
		time.Sleep(time.Millisecond)
		reply(200, "", "x-slept", "1")
	case "exit":
		syscall.Exit(3) // returns: Envoy's proc_exit does not trap
		reply(200, "", "x-after-exit", "1")
	case "panic":
		panic("boom")
	case "alloc":
		mib, _ := strconv.Atoi(get("x-mib"))
		for i := 0; i < mib; i++ {
			held = append(held, make([]byte, 1<<20))
		}
		reply(200, "", "x-held", strconv.Itoa(len(held)))
	case "prop":
		st, val := property(strings.ReplaceAll(get("x-path"), "/", "\x00"))
		reply(200, "", "x-status", itoa(st), "x-value", string(val), "x-hex", hex(val))
	case "setprop":
		path := strings.ReplaceAll(get("x-path"), "/", "\x00")
		v := get("x-value")
		st := proxySetProperty(ptrOf(path), uint32(len(path)), ptrOf(v), uint32(len(v)))
		gst, val := property(path)
		reply(200, "", "x-status", itoa(st), "x-get-status", itoa(gst), "x-value", string(val))
	case "metric":
		by, _ := strconv.ParseInt(get("x-by"), 10, 64)
		reply(200, "", "x-status", itoa(incMetric(get("x-name"), by)))
	case "log":
		logf(4, get("x-msg"))
	case "pause":
		return 1
	case "qreg":
		var q uint32
		st := proxyRegisterSharedQueue(ptrOf("q"), 1, unsafe.Pointer(&q))
		reply(200, "", "x-status", itoa(st), "x-queue", itoa(q))
	case "qenq":
		var q uint32
		vmID, v := get("x-vm-id"), get("x-value")
		st := proxyResolveSharedQueue(ptrOf(vmID), uint32(len(vmID)), ptrOf("q"), 1, unsafe.Pointer(&q))
		if st == 0 {
			st = proxyEnqueueSharedQueue(q, ptrOf(v), uint32(len(v)))
		}
		reply(200, "", "x-status", itoa(st))
	case "mallochost":
		mallocCallsX = true
		property("request\x00path")
	}
	return 0
}

func hex(b []byte) string {
	const digits = "0123456789abcdef"
	out := make([]byte, 0, 2*len(b))
	for _, c := range b {
		out = append(out, digits[c>>4], digits[c&15])
	}
	return string(out)
}

func dispatch(id uint32, get func(string) string) uint32 {
	cluster := get("x-cluster")
	kv := []string{":method", "GET", ":path", get("x-path")}
	if _, ok := header(0, "x-no-authority"); !ok {
		kv = append(kv, ":authority", "callout.test")
	}
	h := pairs(kv...)
	timeout := uint32(1000)
	if t, ok := header(0, "x-timeout"); ok {
		n, _ := strconv.ParseUint(t, 10, 32)
		timeout = uint32(n)
	}
	var token uint32
	st := proxyHTTPCall(ptrOf(cluster), uint32(len(cluster)), unsafe.Pointer(&h[0]), uint32(len(h)),
		nil, 0, nil, 0, timeout, unsafe.Pointer(&token))
	if st != 0 {
		reply(200, "", "x-status", itoa(st))
		return 0
	}
	pending[token] = callout{stream: id, mode: get("x-mode")}
	return 1
}

//go:wasmexport proxy_on_http_call_response
func onHTTPCallResponse(root, token, nh, bs, nt uint32) {
	c, ok := pending[token]
	delete(pending, token)
	if !ok {
		return
	}
	est := proxySetEffectiveContext(c.stream)
	var code, mptr, msize uint32
	proxyGetStatus(unsafe.Pointer(&code), unsafe.Pointer(&mptr), unsafe.Pointer(&msize))
	status, _ := header(6, ":status")
	_, body := buffer(4, bs)
	results := []string{"x-root", itoa(root), "x-nh", itoa(nh), "x-bs", itoa(bs), "x-nt", itoa(nt),
		"x-effective", itoa(est), "x-callout-status", status, "x-get-status", itoa(code),
		"x-get-status-msg", string(bytesAt(mptr, msize))}
	if c.mode == "resume" {
		for i := 0; i < len(results); i += 2 {
			addHeader(0, results[i], results[i+1])
		}
		proxyContinueStream(0)
		return
	}
	reply(200, string(body), results...)
}

// buffering holds the streams whose request body the guest buffers (x-op: buffer).
var buffering = map[uint32]bool{}

//go:wasmexport proxy_on_request_body
func onRequestBody(id, size, eos uint32) uint32 {
	if o := streamsOps[id]; o != nil {
		return streamBody(o, 0, size)
	}
	incMetric("body_bytes", int64(size))
	if !buffering[id] {
		return 0
	}
	incMetric("body_calls", 1)
	if eos == 0 {
		return 1 // StopIterationAndBuffer
	}
	delete(buffering, id)
	_, b := buffer(0, size)
	incMetric("buffered_read", int64(len(b)))
	return 0
}

// bufferingResponse: streams whose response body the guest buffers (x-op buffer_response).
var bufferingResponse = map[uint32]bool{}

//go:wasmexport proxy_on_response_body
func onResponseBody(id, size, eos uint32) uint32 {
	if o := streamsOps[id]; o != nil {
		return streamBody(o, 1, size)
	}
	incMetric("response_body_bytes", int64(size))
	if !bufferingResponse[id] {
		return 0
	}
	incMetric("response_body_calls", 1)
	if eos == 0 {
		return 1 // StopIterationAndBuffer
	}
	delete(bufferingResponse, id)
	_, b := buffer(1, size)
	incMetric("response_buffered_read", int64(len(b)))
	return 0
}

//go:wasmexport proxy_on_queue_ready
func onQueueReady(root, q uint32) {
	var ptr, size uint32
	if proxyDequeueSharedQueue(q, unsafe.Pointer(&ptr), unsafe.Pointer(&size)) == 0 {
		setShared("dequeued", append([]byte(nil), bytesAt(ptr, size)...), 0)
	}
}

// pauseResponse: streams whose response the guest stops on its headers (x-op pause_response) until
// the next tick continues it.
var (
	pauseResponse = map[uint32]bool{}
	heldResponses []uint32
)

//go:wasmexport proxy_on_response_headers
func onResponseHeaders(id, n, eos uint32) uint32 {
	addHeader(2, "x-guest-response", itoa(id))
	if o := streamsOps[id]; o != nil && o.replyOn == "response_headers" {
		limitReply()
	}
	if pauseResponse[id] {
		delete(pauseResponse, id)
		heldResponses = append(heldResponses, id)
		return 1
	}
	return 0
}

//go:wasmexport proxy_on_log
func onLog(id uint32) { incMetric("logs", 1) }

//go:wasmexport proxy_on_done
func onDone(id uint32) uint32 {
	incMetric("dones", 1)
	return 1
}

//go:wasmexport proxy_on_delete
func onDelete(id uint32) {
	incMetric("deletes", 1)
	delete(streamsOps, id)
}
