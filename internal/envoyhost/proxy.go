package envoyhost

import (
	"strings"
	"time"
	"unicode"

	"github.com/tetratelabs/wazero/api"
)

// Spec references below are to docs/envoy-host.md (§N) and to
// https://github.com/proxy-wasm/spec/tree/main/abi-versions/v0.2.1 ("spec#name").

// proxyFuncs returns the env functions Envoy registers for ABI 0.2.x (§1.2).
func proxyFuncs() []hostFunc {
	e := func(name string, params []api.ValueType, impl func(*VM, []uint64) Status) hostFunc {
		return hostFunc{module: modEnv, name: name, params: params, results: r32, gens: allGens,
			impl: func(v *VM, s []uint64) { s[0] = uint64(impl(v, s)) }}
	}
	logLevel := e("proxy_get_log_level", sig(1), proxyGetLogLevel)
	logLevel.only021 = true
	return []hostFunc{
		e("proxy_log", sig(3), proxyLog),
		logLevel,
		e("proxy_get_status", sig(3), proxyGetStatus),
		e("proxy_set_property", sig(4), proxySetProperty),
		e("proxy_get_property", sig(4), proxyGetProperty),
		e("proxy_send_local_response", sig(8), proxySendLocalResponse),
		e("proxy_get_shared_data", sig(5), proxyGetSharedData),
		e("proxy_set_shared_data", sig(5), proxySetSharedData),
		e("proxy_register_shared_queue", sig(3), proxyRegisterSharedQueue),
		e("proxy_resolve_shared_queue", sig(5), proxyResolveSharedQueue),
		e("proxy_dequeue_shared_queue", sig(3), proxyDequeueSharedQueue),
		e("proxy_enqueue_shared_queue", sig(3), proxyEnqueueSharedQueue),
		e("proxy_get_header_map_value", sig(5), proxyGetHeaderMapValue),
		e("proxy_add_header_map_value", sig(5), proxyAddHeaderMapValue),
		e("proxy_replace_header_map_value", sig(5), proxyReplaceHeaderMapValue),
		e("proxy_remove_header_map_value", sig(3), proxyRemoveHeaderMapValue),
		e("proxy_get_header_map_pairs", sig(3), proxyGetHeaderMapPairs),
		e("proxy_set_header_map_pairs", sig(3), proxySetHeaderMapPairs),
		e("proxy_get_header_map_size", sig(2), proxyGetHeaderMapSize),
		e("proxy_get_buffer_status", sig(3), proxyGetBufferStatus),
		e("proxy_get_buffer_bytes", sig(5), proxyGetBufferBytes),
		e("proxy_set_buffer_bytes", sig(5), proxySetBufferBytes),
		e("proxy_http_call", sig(10), proxyHTTPCall),
		e("proxy_grpc_call", sig(12), func(*VM, []uint64) Status { return StatusBadArgument }),
		e("proxy_grpc_stream", sig(9), func(*VM, []uint64) Status { return StatusBadArgument }),
		e("proxy_grpc_close", sig(1), func(*VM, []uint64) Status { return StatusNotFound }),
		e("proxy_grpc_cancel", sig(1), func(*VM, []uint64) Status { return StatusNotFound }),
		e("proxy_grpc_send", sig(4), func(*VM, []uint64) Status { return StatusNotFound }),
		e("proxy_set_tick_period_milliseconds", sig(1), proxySetTickPeriod),
		e("proxy_get_current_time_nanoseconds", sig(1), proxyGetCurrentTime),
		e("proxy_define_metric", sig(4), proxyDefineMetric),
		e("proxy_increment_metric", []api.ValueType{i32, i64}, proxyIncrementMetric),
		e("proxy_record_metric", []api.ValueType{i32, i64}, proxyRecordMetric),
		e("proxy_get_metric", sig(2), proxyGetMetric),
		e("proxy_set_effective_context", sig(1), proxySetEffectiveContext),
		e("proxy_done", nil, func(*VM, []uint64) Status { return StatusOK }),
		e("proxy_call_foreign_function", sig(6), func(*VM, []uint64) Status { return StatusNotFound }),
		e("proxy_continue_stream", sig(1), proxyContinueStream),
		e("proxy_close_stream", sig(1), proxyCloseStream),
		{module: modEnv, name: "pthread_equal", params: sig(2), results: r32, gens: allGens,
			impl: func(_ *VM, s []uint64) {
				if u32(s[0]) == u32(s[1]) {
					s[0] = 1
				} else {
					s[0] = 0
				}
			}},
		{module: modEnv, name: "emscripten_notify_memory_growth", params: sig(1), results: rNone, gens: allGens,
			impl: func(*VM, []uint64) {}},
	}
}

// proxyLog captures the message at the guest's level (spec#proxy_log).
func proxyLog(v *VM, s []uint64) Status {
	msg, ok := v.str(u32(s[1]), u32(s[2]))
	if !ok {
		return StatusInvalidMemoryAccess
	}
	v.p.log(v.index, LogLevel(u32(s[0])), msg)
	return StatusOK
}

// proxyGetLogLevel reports Config.LogLevel (ABI 0.2.1 only, §1.2).
func proxyGetLogLevel(v *VM, s []uint64) Status {
	if !v.mem.WriteUint32Le(u32(s[0]), uint32(v.p.cfg.LogLevel)) {
		return StatusInvalidMemoryAccess
	}
	return StatusOK
}

// proxyGetStatus reports the status of the HTTP call being delivered: Ok, or
// BrokenConnection with "reset" for a failed call (§3).
func proxyGetStatus(v *VM, s []uint64) Status {
	if !v.mem.WriteUint32Le(u32(s[0]), uint32(v.status)) {
		return StatusInvalidMemoryAccess
	}
	return v.copyOutString(v.statusMsg, u32(s[1]), u32(s[2]))
}

// proxySetProperty stores a value that get_property of the same path returns, like
// Envoy's filter state wasm.<path> (§6).
func proxySetProperty(v *VM, s []uint64) Status {
	path, ok1 := v.str(u32(s[0]), u32(s[1]))
	val, ok2 := v.view(u32(s[2]), u32(s[3]))
	if !ok1 || !ok2 {
		return StatusInvalidMemoryAccess
	}
	fs := &v.filterState
	if st := v.stream(); st != nil {
		fs = &st.filterState
	}
	if *fs == nil {
		*fs = make(map[string][]byte)
	}
	(*fs)[path] = append([]byte(nil), val...)
	return StatusOK
}

// proxyGetProperty resolves Envoy's property paths (§6).
func proxyGetProperty(v *VM, s []uint64) Status {
	path, ok := v.view(u32(s[0]), u32(s[1]))
	if !ok {
		return StatusInvalidMemoryAccess
	}
	val, st := v.property(string(path))
	if st != StatusOK {
		return st
	}
	return v.copyOut(val, u32(s[2]), u32(s[3]))
}

// proxySendLocalResponse queues a local reply that is sent after the guest call
// returns, and forces the current callback's result to stop (§4). A second call on
// the same stream is BadArgument; on the root context it does nothing.
func proxySendLocalResponse(v *VM, s []uint64) Status {
	details, ok1 := v.str(u32(s[1]), u32(s[2]))
	body, ok2 := v.view(u32(s[3]), u32(s[4]))
	hdrs, ok3 := v.view(u32(s[5]), u32(s[6]))
	if !ok1 || !ok2 || !ok3 {
		return StatusInvalidMemoryAccess
	}
	st := v.stream()
	v.stopNext = true
	if st == nil {
		return StatusOK
	}
	if st.localReplyHold {
		return StatusBadArgument
	}
	st.localReplyHold = true
	reply := &LocalReply{
		Status:     int(u32(s[0])),
		Headers:    lowerHeaders(parsePairs(hdrs)),
		Body:       append([]byte(nil), body...),
		GRPCStatus: int32(u32(s[7])),
		Details: strings.Map(func(r rune) rune {
			if unicode.IsSpace(r) {
				return '_'
			}
			return r
		}, details),
	}
	if reply.GRPCStatus < 0 || reply.GRPCStatus > 16 {
		reply.GRPCStatus = -1
	}
	v.deferred = append(v.deferred, deferredAction{kind: deferLocalReply, stream: st, reply: reply})
	return StatusOK
}

// proxyGetSharedData implements spec#proxy_get_shared_data with Envoy's rules (§2):
// NotFound writes nothing; an empty value is ptr=0, size=0 without allocation.
func proxyGetSharedData(v *VM, s []uint64) Status {
	key, ok := v.view(u32(s[0]), u32(s[1]))
	if !ok {
		return StatusInvalidMemoryAccess
	}
	var cas uint32
	st := v.p.proc.getShared(v.p.cfg.VMID, string(key), func(val []byte, c uint32) {
		v.scratch = append(v.scratch[:0], val...)
		cas = c
	})
	if st != StatusOK {
		return st
	}
	if st := v.copyOut(v.scratch, u32(s[2]), u32(s[3])); st != StatusOK {
		return st
	}
	if !v.mem.WriteUint32Le(u32(s[4]), cas) {
		return StatusInvalidMemoryAccess
	}
	return StatusOK
}

// proxySetSharedData implements spec#proxy_set_shared_data with Envoy's CAS rules (§2).
func proxySetSharedData(v *VM, s []uint64) Status {
	key, ok1 := v.view(u32(s[0]), u32(s[1]))
	val, ok2 := v.view(u32(s[2]), u32(s[3]))
	if !ok1 || !ok2 {
		return StatusInvalidMemoryAccess
	}
	return v.p.proc.SetSharedData(v.p.cfg.VMID, string(key), val, u32(s[4]))
}

// proxyRegisterSharedQueue implements spec#proxy_register_shared_queue; queues are
// keyed by vm_id and name (§5).
func proxyRegisterSharedQueue(v *VM, s []uint64) Status {
	name, ok := v.str(u32(s[0]), u32(s[1]))
	if !ok {
		return StatusInvalidMemoryAccess
	}
	id := v.p.proc.registerQueue(v.p.cfg.VMID, name, v)
	if !v.mem.WriteUint32Le(u32(s[2]), id) {
		return StatusInvalidMemoryAccess
	}
	return StatusOK
}

// proxyResolveSharedQueue implements spec#proxy_resolve_shared_queue.
func proxyResolveSharedQueue(v *VM, s []uint64) Status {
	vmID, ok1 := v.str(u32(s[0]), u32(s[1]))
	name, ok2 := v.str(u32(s[2]), u32(s[3]))
	if !ok1 || !ok2 {
		return StatusInvalidMemoryAccess
	}
	id, found := v.p.proc.resolveQueue(vmID, name)
	if !found {
		return StatusNotFound
	}
	if !v.mem.WriteUint32Le(u32(s[4]), id) {
		return StatusInvalidMemoryAccess
	}
	return StatusOK
}

// proxyDequeueSharedQueue implements spec#proxy_dequeue_shared_queue: Empty when
// there is nothing to dequeue.
func proxyDequeueSharedQueue(v *VM, s []uint64) Status {
	val, st := v.p.proc.dequeue(u32(s[0]))
	if st != StatusOK {
		return st
	}
	return v.copyOut(val, u32(s[1]), u32(s[2]))
}

// proxyEnqueueSharedQueue implements spec#proxy_enqueue_shared_queue; the owner's
// proxy_on_queue_ready runs later, between its guest calls.
func proxyEnqueueSharedQueue(v *VM, s []uint64) Status {
	val, ok := v.view(u32(s[1]), u32(s[2]))
	if !ok {
		return StatusInvalidMemoryAccess
	}
	id := u32(s[0])
	owner, st := v.p.proc.enqueue(id, val)
	if st == StatusOK && owner != nil {
		owner.p.goAsync(func() { owner.deliverQueueReady(id) })
	}
	return st
}

// headerMap returns the header map of type t for the effective context, nil when it
// is not available in the current phase (§6: BadArgument).
func (v *VM) headerMap(t uint32) *Headers {
	switch t {
	case 6:
		if v.callResp != nil {
			return &v.callResp.headers
		}
		return nil
	case 7:
		if v.callResp != nil {
			return &v.callResp.trailers
		}
		return nil
	}
	st := v.stream()
	if st == nil {
		return nil
	}
	switch t {
	case 0:
		if st.reqHeadersOpen {
			return &st.reqHeaders
		}
	case 1:
		if st.reqTrailersOpen {
			return &st.reqTrailers
		}
	case 2:
		if st.respHeadersOpen {
			return &st.respHeaders
		}
	case 3:
		if st.respTrailersOpen {
			return &st.respTrailers
		}
	}
	return nil
}

// headerMapKey resolves the map type in s[0] and the lower-cased key at s[1], s[2] that the header
// map functions share: BadArgument for a map not available now, InvalidMemoryAccess for a bad key.
func (v *VM) headerMapKey(s []uint64) (*Headers, string, Status) {
	h := v.headerMap(u32(s[0]))
	if h == nil {
		return nil, "", StatusBadArgument
	}
	key, ok := v.str(u32(s[1]), u32(s[2]))
	if !ok {
		return nil, "", StatusInvalidMemoryAccess
	}
	return h, lower(key), StatusOK
}

// proxyGetHeaderMapValue implements spec#proxy_get_header_map_value: the first value.
func proxyGetHeaderMapValue(v *VM, s []uint64) Status {
	h, key, st := v.headerMapKey(s)
	if st != StatusOK {
		return st
	}
	for _, kv := range *h {
		if kv[0] == key {
			return v.copyOutString(kv[1], u32(s[3]), u32(s[4]))
		}
	}
	return StatusNotFound
}

// proxyAddHeaderMapValue implements spec#proxy_add_header_map_value.
func proxyAddHeaderMapValue(v *VM, s []uint64) Status {
	h, key, st := v.headerMapKey(s)
	if st != StatusOK {
		return st
	}
	val, ok := v.str(u32(s[3]), u32(s[4]))
	if !ok {
		return StatusInvalidMemoryAccess
	}
	*h = append(*h, [2]string{key, val})
	return StatusOK
}

// proxyReplaceHeaderMapValue implements spec#proxy_replace_header_map_value: every
// value of the key is replaced by one, or the header is added.
func proxyReplaceHeaderMapValue(v *VM, s []uint64) Status {
	h, key, st := v.headerMapKey(s)
	if st != StatusOK {
		return st
	}
	val, ok := v.str(u32(s[3]), u32(s[4]))
	if !ok {
		return StatusInvalidMemoryAccess
	}
	out := (*h)[:0]
	replaced := false
	for _, kv := range *h {
		if kv[0] == key {
			if replaced {
				continue
			}
			kv[1], replaced = val, true
		}
		out = append(out, kv)
	}
	if !replaced {
		out = append(out, [2]string{key, val})
	}
	*h = out
	return StatusOK
}

// proxyRemoveHeaderMapValue implements spec#proxy_remove_header_map_value; removing a
// missing header is Ok.
func proxyRemoveHeaderMapValue(v *VM, s []uint64) Status {
	h, key, st := v.headerMapKey(s)
	if st != StatusOK {
		return st
	}
	out := (*h)[:0]
	for _, kv := range *h {
		if kv[0] != key {
			out = append(out, kv)
		}
	}
	*h = out
	return StatusOK
}

// proxyGetHeaderMapPairs implements spec#proxy_get_header_map_pairs; an empty map is
// ptr=0, size=0.
func proxyGetHeaderMapPairs(v *VM, s []uint64) Status {
	h := v.headerMap(u32(s[0]))
	if h == nil {
		return StatusBadArgument
	}
	if len(*h) == 0 {
		return v.copyOut(nil, u32(s[1]), u32(s[2]))
	}
	v.scratch = appendPairs(v.scratch[:0], *h)
	return v.copyOut(v.scratch, u32(s[1]), u32(s[2]))
}

// proxySetHeaderMapPairs implements spec#proxy_set_header_map_pairs: the map is
// replaced.
func proxySetHeaderMapPairs(v *VM, s []uint64) Status {
	h := v.headerMap(u32(s[0]))
	if h == nil {
		return StatusBadArgument
	}
	b, ok := v.view(u32(s[1]), u32(s[2]))
	if !ok {
		return StatusInvalidMemoryAccess
	}
	*h = lowerHeaders(parsePairs(b))
	return StatusOK
}

// proxyGetHeaderMapSize implements spec#proxy_get_header_map_size: Envoy's byteSize.
func proxyGetHeaderMapSize(v *VM, s []uint64) Status {
	h := v.headerMap(u32(s[0]))
	if h == nil {
		return StatusBadArgument
	}
	if !v.mem.WriteUint32Le(u32(s[1]), uint32(headersByteSize(*h))) {
		return StatusInvalidMemoryAccess
	}
	return StatusOK
}

// buffer returns buffer t for the effective context and whether it may be written,
// nil when Envoy has none (NotFound). The plugin configuration is only visible during
// proxy_on_configure.
func (v *VM) buffer(t uint32) (*[]byte, bool) {
	switch t {
	case 0, 1:
		st := v.stream()
		if st == nil {
			return nil, false
		}
		if t == 0 && st.reqBodyOpen || t == 1 && st.respBodyOpen {
			return st.bodyView(int(t)), true
		}
	case 4:
		if v.callResp != nil {
			return &v.callResp.body, false
		}
	case 6:
		return &v.p.cfg.VMConfig, false
	case 7:
		if v.configuring {
			return &v.p.cfg.PluginConfig, false
		}
	}
	return nil, false
}

// proxyGetBufferStatus implements spec#proxy_get_buffer_status.
func proxyGetBufferStatus(v *VM, s []uint64) Status {
	b, _ := v.buffer(u32(s[0]))
	if b == nil {
		return StatusNotFound
	}
	if !v.mem.WriteUint32Le(u32(s[1]), uint32(len(*b))) || !v.mem.WriteUint32Le(u32(s[2]), 0) {
		return StatusInvalidMemoryAccess
	}
	return StatusOK
}

// proxyGetBufferBytes implements spec#proxy_get_buffer_bytes as cpp-host does: the
// length is clipped to the buffer, and nothing is written when it clips to 0.
func proxyGetBufferBytes(v *VM, s []uint64) Status {
	b, _ := v.buffer(u32(s[0]))
	if b == nil {
		return StatusNotFound
	}
	start, length := uint64(u32(s[1])), uint64(u32(s[2]))
	size := uint64(len(*b))
	if start > size {
		return StatusBadArgument
	}
	if start+length > size {
		length = size - start
	}
	if length == 0 {
		return StatusOK
	}
	v.countCopy(u32(s[0]), int(length))
	return v.copyOut((*b)[start:start+length], u32(s[3]), u32(s[4]))
}

// proxySetBufferBytes implements spec#proxy_set_buffer_bytes for the body buffers like
// Envoy's Buffer::copyFrom: start 0 replaces the first length bytes, start at or past
// the end appends, anything else is BadArgument.
func proxySetBufferBytes(v *VM, s []uint64) Status {
	b, writable := v.buffer(u32(s[0]))
	if b == nil {
		return StatusNotFound
	}
	if !writable {
		return StatusBadArgument
	}
	data, ok := v.view(u32(s[3]), u32(s[4]))
	if !ok {
		return StatusInvalidMemoryAccess
	}
	start, length := int(u32(s[1])), int(u32(s[2]))
	switch {
	case start == 0:
		if length > len(*b) {
			length = len(*b)
		}
		rest := (*b)[length:]
		nb := make([]byte, 0, len(data)+len(rest))
		*b = append(append(nb, data...), rest...)
	case start >= len(*b):
		*b = append(*b, data...)
	default:
		return StatusBadArgument
	}
	return StatusOK
}

// proxySetTickPeriod implements spec#proxy_set_tick_period_milliseconds: one timer per
// VM on the virtual clock, 0 disables it, the first tick comes one period later (§5).
func proxySetTickPeriod(v *VM, s []uint64) Status {
	v.p.clock.setTimer(v, time.Duration(u32(s[0]))*time.Millisecond)
	return StatusOK
}

// proxyGetCurrentTime implements spec#proxy_get_current_time_nanoseconds from the
// virtual clock.
func proxyGetCurrentTime(v *VM, s []uint64) Status {
	if !v.mem.WriteUint64Le(u32(s[0]), uint64(v.p.clock.Now().UnixNano())) {
		return StatusInvalidMemoryAccess
	}
	return StatusOK
}

// Envoy's metric ids carry the type in their low two bits (Wasm::kMetricTypeMask).
const (
	metricTypeMask = 0x3
	metricIDStep   = 0x4
)

// proxyDefineMetric implements spec#proxy_define_metric: a new id on every call, bound
// to the process-wide metric of that name.
func proxyDefineMetric(v *VM, s []uint64) Status {
	typ := u32(s[0])
	if typ > uint32(Histogram) {
		return StatusBadArgument
	}
	name, ok := v.str(u32(s[1]), u32(s[2]))
	if !ok {
		return StatusInvalidMemoryAccess
	}
	id := v.nextMetric*metricIDStep + typ
	v.nextMetric++
	if v.metricIDs == nil {
		v.metricIDs = make(map[uint32]*metric)
	}
	v.metricIDs[id] = v.p.proc.metric(name, MetricType(typ))
	if !v.mem.WriteUint32Le(u32(s[3]), id) {
		return StatusInvalidMemoryAccess
	}
	return StatusOK
}

// proxyIncrementMetric implements spec#proxy_increment_metric as Envoy does: a counter
// takes only positive offsets, a gauge adds or subtracts, a histogram is BadArgument.
func proxyIncrementMetric(v *VM, s []uint64) Status {
	m := v.metricIDs[u32(s[0])]
	if m == nil {
		return StatusNotFound
	}
	off := int64(s[1])
	pr := v.p.proc
	pr.metricsMu.Lock()
	defer pr.metricsMu.Unlock()
	switch m.typ {
	case Counter:
		if off <= 0 {
			return StatusBadArgument
		}
		m.value += off
	case Gauge:
		m.value += off
	default:
		return StatusBadArgument
	}
	return StatusOK
}

// proxyRecordMetric implements spec#proxy_record_metric: a counter adds, a gauge is
// set, a histogram records.
func proxyRecordMetric(v *VM, s []uint64) Status {
	m := v.metricIDs[u32(s[0])]
	if m == nil {
		return StatusNotFound
	}
	val := s[1]
	pr := v.p.proc
	pr.metricsMu.Lock()
	defer pr.metricsMu.Unlock()
	switch m.typ {
	case Counter:
		m.value += int64(val)
	case Gauge:
		m.value = int64(val)
	case Histogram:
		m.value = int64(val)
		m.count++
		m.sum += val
	}
	return StatusOK
}

// proxyGetMetric implements spec#proxy_get_metric for counters and gauges.
func proxyGetMetric(v *VM, s []uint64) Status {
	m := v.metricIDs[u32(s[0])]
	if m == nil {
		return StatusNotFound
	}
	pr := v.p.proc
	pr.metricsMu.Lock()
	typ, val := m.typ, m.value
	pr.metricsMu.Unlock()
	if typ == Histogram {
		return StatusBadArgument
	}
	if !v.mem.WriteUint64Le(u32(s[1]), uint64(val)) {
		return StatusInvalidMemoryAccess
	}
	return StatusOK
}

// proxySetEffectiveContext implements spec#proxy_set_effective_context: BadArgument
// for an id that is neither the root nor a live stream of this VM (§3).
func proxySetEffectiveContext(v *VM, s []uint64) Status {
	id := u32(s[0])
	if id != v.rootID {
		if _, ok := v.streams[id]; !ok {
			return StatusBadArgument
		}
	}
	v.effective = id
	return StatusOK
}

// proxyContinueStream implements spec#proxy_continue_stream: the resume is deferred
// until the guest call returns, and the request headers, body and trailers stop being
// accessible at once, as in Envoy's Context::continueStream (§4).
func proxyContinueStream(v *VM, s []uint64) Status {
	dir := u32(s[0])
	if dir > 1 {
		return StatusBadArgument
	}
	if st := v.stream(); st != nil {
		v.deferred = append(v.deferred, deferredAction{kind: deferContinue, stream: st, dir: int(dir)})
		st.reqHeadersOpen, st.reqBodyOpen, st.reqTrailersOpen = false, false, false
	}
	return StatusOK
}

// proxyCloseStream implements spec#proxy_close_stream: the stream is reset after the
// guest call returns.
func proxyCloseStream(v *VM, s []uint64) Status {
	if u32(s[0]) > 1 {
		return StatusBadArgument
	}
	if st := v.stream(); st != nil {
		v.deferred = append(v.deferred, deferredAction{kind: deferClose, stream: st})
	}
	return StatusOK
}
