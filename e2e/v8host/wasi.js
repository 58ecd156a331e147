'use strict';
// Envoy's WASI: the 18 functions of proxy-wasm-cpp-host after its PR #427 (what Envoy >= 1.33 ships),
// with Envoy's errno values. Registered under wasi_snapshot_preview1 and wasi_unstable.
const crypto = require('crypto');
const { Errno, LogLevel } = require('./abi');

const randomGetMax = 64 << 10; // PROXY_WASM_HOST_WASI_RANDOM_GET_MAX_SIZE_BYTES

const ret = (errno) => () => errno;

// Each entry: [name, params, results, impl(vm, ...args) → errno]. i64 parameters arrive as BigInt.
const functions = [
  ['args_get', 'i32 i32', 'i32', ret(Errno.SUCCESS)],
  ['args_sizes_get', 'i32 i32', 'i32', (vm, argc, size) => {
    vm.mem.setU32(argc, 0);
    vm.mem.setU32(size, 0);
    return Errno.SUCCESS;
  }],
  ['clock_time_get', 'i32 i64 i32', 'i32', (vm, id, _precision, out) => {
    if (id !== 0 && id !== 1) return Errno.NOTSUP;
    vm.mem.setU64(out, id === 0 ? vm.plugin.clock.now : vm.plugin.clock.monotonic());
    return Errno.SUCCESS;
  }],
  ['environ_get', 'i32 i32', 'i32', (vm, ptrs, buf) => {
    vm.plugin.environ.forEach((e, i) => {
      vm.mem.setU32(ptrs + 4 * i, buf);
      vm.mem.write(buf, Buffer.from(e + '\0', 'latin1'));
      buf += e.length + 1;
    });
    return Errno.SUCCESS;
  }],
  ['environ_sizes_get', 'i32 i32', 'i32', (vm, count, size) => {
    vm.mem.setU32(count, vm.plugin.environ.length);
    vm.mem.setU32(size, vm.plugin.environ.reduce((n, e) => n + e.length + 1, 0));
    return Errno.SUCCESS;
  }],
  ['fd_close', 'i32', 'i32', (vm) => {
    vm.plugin.log(vm.index, LogLevel.trace, 'wasi_unstable fd_close');
    return Errno.SUCCESS;
  }],
  ['fd_fdstat_get', 'i32 i32', 'i32', (vm, fd, out) => {
    if (fd !== 1 && fd !== 2) return Errno.BADF;
    const stat = Buffer.alloc(24);
    stat.writeBigUInt64LE(64n, 8); // rights_base = FD_WRITE
    vm.mem.write(out, stat);
    return Errno.SUCCESS;
  }],
  ['fd_fdstat_set_flags', 'i32 i32', 'i32', ret(Errno.NOSYS)],
  ['fd_prestat_dir_name', 'i32 i32 i32', 'i32', ret(Errno.NOSYS)],
  ['fd_prestat_get', 'i32 i32', 'i32', ret(Errno.BADF)],
  ['fd_read', 'i32 i32 i32 i32', 'i32', ret(Errno.NOSYS)],
  ['fd_seek', 'i32 i64 i32 i32', 'i32', (vm) => {
    vm.plugin.log(vm.index, LogLevel.trace, 'wasi_unstable fd_seek');
    return Errno.SUCCESS; // newoffset is not written
  }],
  ['fd_write', 'i32 i32 i32 i32', 'i32', fdWrite],
  ['path_open', 'i32 i32 i32 i32 i32 i64 i64 i32 i32', 'i32', ret(Errno.NOENT)],
  ['poll_oneoff', 'i32 i32 i32 i32', 'i32', (vm) => {
    vm.plugin.pollCalls++;
    return Errno.NOSYS; // the #427 stub: the Go runtime dies if it ever waits
  }],
  ['proc_exit', 'i32', '', (vm) => {
    // Envoy logs and returns normally; Go then executes unreachable and the VM traps.
    vm.plugin.log(vm.index, LogLevel.trace, 'wasi_unstable proc_exit');
  }],
  ['random_get', 'i32 i32', 'i32', (vm, buf, n) => {
    if (n > randomGetMax) return Errno.INVAL;
    crypto.randomFillSync(vm.mem.bytes(buf, n));
    return Errno.SUCCESS;
  }],
  ['sched_yield', '', 'i32', ret(Errno.SUCCESS)],
];

// fdWrite logs what the guest writes to stdout at info and to stderr at error, one entry per call
// with one trailing newline removed; other fds are EBADF.
function fdWrite(vm, fd, iovs, n, nwritten) {
  if (fd !== 1 && fd !== 2) return Errno.BADF;
  const parts = [];
  for (let i = 0; i < n; i++) {
    const ptr = vm.mem.u32(iovs + 8 * i);
    const size = vm.mem.u32(iovs + 8 * i + 4);
    parts.push(Buffer.from(vm.mem.bytes(ptr, size)));
  }
  let msg = Buffer.concat(parts).toString('latin1');
  vm.mem.setU32(nwritten, msg.length);
  if (msg.endsWith('\n')) msg = msg.slice(0, -1);
  vm.plugin.log(vm.index, fd === 1 ? LogLevel.info : LogLevel.error, msg);
  return Errno.SUCCESS;
}

// The host calls allowed while _initialize runs, and while the host re-enters the guest's allocator
// (#427 generation); any other host call traps with restricted_callback.
const startAllowed = new Set(['env.proxy_log', 'env.emscripten_notify_memory_growth'].concat(
  ['fd_write', 'args_sizes_get', 'args_get', 'environ_sizes_get', 'environ_get', 'fd_prestat_get',
    'fd_prestat_dir_name', 'clock_time_get', 'random_get', 'fd_fdstat_get', 'fd_fdstat_set_flags']
    .map((n) => 'wasi_snapshot_preview1.' + n)));
const mallocAllowed = new Set(['env.proxy_log', 'wasi_snapshot_preview1.fd_write', 'wasi_snapshot_preview1.clock_time_get']);

module.exports = { functions, startAllowed, mallocAllowed };
