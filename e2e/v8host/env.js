'use strict';
// Envoy's env.proxy_* functions for ABI 0.2.0 (proxy-wasm-cpp-host exports.cc, Envoy context.cc).
// Left out, with Envoy's answer for a proxy that has nothing configured: HTTP callouts (BadArgument, as
// for an unknown cluster), gRPC (BadArgument / NotFound), foreign functions (NotFound) and shared queues
// (NotFound on resolve and use; register answers Unimplemented).
const { Status, asciiLower, encodePairs, decodePairs } = require('./abi');
const { property } = require('./properties');

const S = Status;
const notFound = () => S.NotFound;
const badArgument = () => S.BadArgument;

// Each entry: [name, params, impl(vm, ...args) → status]; every result is an i32.
const functions = [
  ['proxy_log', 'i32 i32 i32', (vm, level, p, n) => {
    vm.plugin.log(vm.index, level, vm.mem.str(p, n));
    return S.OK;
  }],
  ['proxy_get_status', 'i32 i32 i32', (vm, code, p, n) => {
    vm.mem.setU32(code, 0);
    return vm.copyOut('', p, n);
  }],
  ['proxy_set_property', 'i32 i32 i32 i32', (vm, kp, kn, vp, vn) => {
    const st = vm.stream();
    (st ? st.filterState : vm.filterState).set(vm.mem.str(kp, kn), vm.mem.str(vp, vn));
    return S.OK;
  }],
  ['proxy_get_property', 'i32 i32 i32 i32', (vm, kp, kn, out, outn) => {
    const val = property(vm, vm.mem.str(kp, kn));
    return val === undefined ? S.NotFound : vm.copyOut(val, out, outn);
  }],
  ['proxy_send_local_response', 'i32 i32 i32 i32 i32 i32 i32 i32', sendLocalResponse],
  ['proxy_get_shared_data', 'i32 i32 i32 i32 i32', (vm, kp, kn, out, outn, casp) => {
    const e = vm.plugin.proc.getShared(vm.plugin.cfg.vmId, vm.mem.str(kp, kn));
    if (!e) return S.NotFound;
    const st = vm.copyOut(e.value, out, outn);
    if (st !== S.OK) return st;
    vm.mem.setU32(casp, e.cas);
    return S.OK;
  }],
  ['proxy_set_shared_data', 'i32 i32 i32 i32 i32', (vm, kp, kn, vp, vn, cas) =>
    vm.plugin.proc.setShared(vm.plugin.cfg.vmId, vm.mem.str(kp, kn), vm.mem.str(vp, vn), cas >>> 0)],
  ['proxy_register_shared_queue', 'i32 i32 i32', () => S.Unimplemented],
  ['proxy_resolve_shared_queue', 'i32 i32 i32 i32 i32', notFound],
  ['proxy_dequeue_shared_queue', 'i32 i32 i32', notFound],
  ['proxy_enqueue_shared_queue', 'i32 i32 i32', notFound],
  ['proxy_get_header_map_value', 'i32 i32 i32 i32 i32', (vm, t, kp, kn, out, outn) => {
    const h = vm.headerMap(t);
    if (!h) return S.BadArgument;
    const key = asciiLower(vm.mem.str(kp, kn));
    const kv = h.find((e) => e[0] === key); // Envoy returns the first of repeated headers
    return kv ? vm.copyOut(kv[1], out, outn) : S.NotFound;
  }],
  ['proxy_add_header_map_value', 'i32 i32 i32 i32 i32', (vm, t, kp, kn, vp, vn) => {
    const h = vm.headerMap(t);
    if (!h) return S.BadArgument;
    h.push([asciiLower(vm.mem.str(kp, kn)), vm.mem.str(vp, vn)]);
    return S.OK;
  }],
  ['proxy_replace_header_map_value', 'i32 i32 i32 i32 i32', (vm, t, kp, kn, vp, vn) => {
    const h = vm.headerMap(t);
    if (!h) return S.BadArgument;
    const key = asciiLower(vm.mem.str(kp, kn));
    const val = vm.mem.str(vp, vn);
    const i = h.findIndex((e) => e[0] === key);
    if (i < 0) {
      h.push([key, val]);
      return S.OK;
    }
    h[i] = [key, val];
    removeFrom(h, (e, j) => j > i && e[0] === key);
    return S.OK;
  }],
  ['proxy_remove_header_map_value', 'i32 i32 i32', (vm, t, kp, kn) => {
    const h = vm.headerMap(t);
    if (!h) return S.BadArgument;
    const key = asciiLower(vm.mem.str(kp, kn));
    removeFrom(h, (e) => e[0] === key);
    return S.OK;
  }],
  ['proxy_get_header_map_pairs', 'i32 i32 i32', (vm, t, out, outn) => {
    const h = vm.headerMap(t);
    if (!h) return S.BadArgument;
    return vm.copyOut(h.length ? encodePairs(h) : '', out, outn);
  }],
  ['proxy_set_header_map_pairs', 'i32 i32 i32', (vm, t, p, n) => {
    const h = vm.headerMap(t);
    if (!h) return S.BadArgument;
    const pairs = decodePairs(vm.mem.bytes(p, n)).map(([k, v]) => [asciiLower(k), v]);
    h.splice(0, h.length, ...pairs);
    return S.OK;
  }],
  ['proxy_get_header_map_size', 'i32 i32', (vm, t, out) => {
    const h = vm.headerMap(t);
    if (!h) return S.BadArgument;
    vm.mem.setU32(out, h.reduce((n, [k, v]) => n + k.length + v.length, 0));
    return S.OK;
  }],
  ['proxy_get_buffer_status', 'i32 i32 i32', (vm, t, lenp, flagsp) => {
    const b = vm.buffer(t);
    if (b === undefined) return S.NotFound;
    vm.mem.setU32(lenp, b.length);
    vm.mem.setU32(flagsp, 0);
    return S.OK;
  }],
  ['proxy_get_buffer_bytes', 'i32 i32 i32 i32 i32', (vm, t, start, length, out, outn) => {
    const b = vm.buffer(t);
    if (b === undefined) return S.NotFound;
    start >>>= 0;
    length >>>= 0;
    if (start > b.length) return S.BadArgument;
    length = Math.min(length, b.length - start);
    return length === 0 ? S.OK : vm.copyOut(b.slice(start, start + length), out, outn);
  }],
  ['proxy_set_buffer_bytes', 'i32 i32 i32 i32 i32', setBufferBytes],
  ['proxy_http_call', 'i32 i32 i32 i32 i32 i32 i32 i32 i32 i32', badArgument],
  ['proxy_grpc_call', 'i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32', badArgument],
  ['proxy_grpc_stream', 'i32 i32 i32 i32 i32 i32 i32 i32 i32', badArgument],
  ['proxy_grpc_close', 'i32', notFound],
  ['proxy_grpc_cancel', 'i32', notFound],
  ['proxy_grpc_send', 'i32 i32 i32 i32', notFound],
  ['proxy_set_tick_period_milliseconds', 'i32', (vm, ms) => {
    vm.plugin.clock.setTimer(vm, BigInt(ms >>> 0) * 1000000n);
    return S.OK;
  }],
  ['proxy_get_current_time_nanoseconds', 'i32', (vm, out) => {
    vm.mem.setU64(out, vm.plugin.clock.now);
    return S.OK;
  }],
  ['proxy_define_metric', 'i32 i32 i32 i32', (vm, type, np, nn, out) => {
    if (type > 2) return S.BadArgument;
    const id = vm.metrics.length * 4 + type; // Envoy keeps the type in the low two bits
    vm.metrics.push(vm.plugin.proc.metric(vm.mem.str(np, nn), type));
    vm.mem.setU32(out, id);
    return S.OK;
  }],
  ['proxy_increment_metric', 'i32 i64', (vm, id, off) => {
    const m = vm.metric(id);
    if (!m) return S.NotFound;
    if (m.type === 2 || (m.type === 0 && off <= 0n)) return S.BadArgument;
    m.value += off;
    return S.OK;
  }],
  ['proxy_record_metric', 'i32 i64', (vm, id, val) => {
    const m = vm.metric(id);
    if (!m) return S.NotFound;
    if (m.type === 0) m.value += val;
    else m.value = val;
    return S.OK;
  }],
  ['proxy_get_metric', 'i32 i32', (vm, id, out) => {
    const m = vm.metric(id);
    if (!m) return S.NotFound;
    if (m.type === 2) return S.BadArgument;
    vm.mem.setU64(out, m.value);
    return S.OK;
  }],
  ['proxy_set_effective_context', 'i32', (vm, id) => {
    if (id !== vm.rootId && !vm.streams.has(id)) return S.BadArgument;
    vm.effective = id;
    return S.OK;
  }],
  ['proxy_done', '', () => S.OK],
  ['proxy_call_foreign_function', 'i32 i32 i32 i32 i32 i32', notFound],
  ['proxy_continue_stream', 'i32', (vm, dir) => {
    if (dir >>> 0 > 1) return S.BadArgument;
    const st = vm.stream();
    if (st) {
      vm.deferred.push(() => st.resume(dir));
      st.open.reqHeaders = st.open.reqBody = st.open.reqTrailers = false;
    }
    return S.OK;
  }],
  ['proxy_close_stream', 'i32', (vm, dir) => {
    if (dir >>> 0 > 1) return S.BadArgument;
    const st = vm.stream();
    if (st) vm.deferred.push(() => st.resetStream());
    return S.OK;
  }],
  ['pthread_equal', 'i32 i32', (_vm, a, b) => (a === b ? 1 : 0)],
];

// emscripten_notify_memory_growth has no result.
const voidFunctions = [['emscripten_notify_memory_growth', 'i32', () => undefined]];

// sendLocalResponse queues a local reply that is sent after the guest call returns and forces the
// current callback's result to stop. A second reply on the same stream is BadArgument.
function sendLocalResponse(vm, status, dp, dn, bp, bn, hp, hn, grpc) {
  const details = vm.mem.str(dp, dn).replace(/\s/g, '_');
  const body = vm.mem.str(bp, bn);
  const headers = decodePairs(vm.mem.bytes(hp, hn)).map(([k, v]) => [asciiLower(k), v]);
  const st = vm.stream();
  vm.stopNext = true;
  if (!st) return S.OK;
  if (st.localReplyHold) return S.BadArgument;
  st.localReplyHold = true;
  const reply = { status: status >>> 0, headers, body, grpcStatus: grpc < 0 || grpc > 16 ? -1 : grpc, details };
  vm.deferred.push(() => st.sendLocalReply(reply, false));
  return S.OK;
}

// setBufferBytes writes a body buffer as Envoy's Buffer::copyFrom does: start 0 drains length bytes
// (all of them when length passes the end) and prepends the data, a start at or past the end appends,
// any other start is BadArgument; the other buffers are not writable.
function setBufferBytes(vm, t, start, length, p, n) {
  const b = vm.buffer(t);
  if (b === undefined) return S.NotFound;
  if (t > 1) return S.BadArgument;
  [start, length] = [start >>> 0, length >>> 0];
  const data = vm.mem.str(p, n);
  if (start === 0) vm.stream().setBodyView(t, data + b.slice(Math.min(length, b.length)));
  else if (start >= b.length) vm.stream().setBodyView(t, b + data);
  else return S.BadArgument;
  return S.OK;
}

function removeFrom(h, drop) {
  const kept = h.filter((e, j) => !drop(e, j));
  h.splice(0, h.length, ...kept);
}

module.exports = { functions, voidFunctions };
