'use strict';
// A plugin loaded the way Envoy loads a Wasm HTTP filter on V8: compile, check the ABI version export,
// the allocator and every import and callback signature (with Envoy's messages), run the base VM's
// _initialize, run the canary (root context, proxy_on_vm_start, proxy_on_configure, then dropped
// without on_done/on_delete), then start workers+1 thread VMs. A thread VM that fails to start is
// marked failed rather than failing the load, as in Envoy.
const { LogLevel, levelNames } = require('./abi');
const wasmfile = require('./wasmfile');
const wasi = require('./wasi');
const env = require('./env');
const { VM } = require('./vm');
const { Process, Clock } = require('./process');

const BASE_VM = -2;
const CANARY_VM = -1;

// The signature of every host function, by "module.name".
const hostSigs = new Map();
for (const [name, params, results] of wasi.functions) hostSigs.set('wasi_snapshot_preview1.' + name, [params, results]);
for (const [name, params] of env.functions) hostSigs.set('env.' + name, [params, 'i32']);
for (const [name, params] of env.voidFunctions) hostSigs.set('env.' + name, [params, '']);

// The signatures Envoy requires of the exports it calls.
const exportSigs = {
  malloc: ['i32', 'i32'], proxy_on_memory_allocate: ['i32', 'i32'], _initialize: ['', ''], _start: ['', ''],
  main: ['i32 i32', 'i32'], __main_void: ['', 'i32'], proxy_on_context_create: ['i32 i32', ''],
  proxy_on_vm_start: ['i32 i32', 'i32'], proxy_on_configure: ['i32 i32', 'i32'],
  proxy_on_request_headers: ['i32 i32 i32', 'i32'], proxy_on_request_body: ['i32 i32 i32', 'i32'],
  proxy_on_request_trailers: ['i32 i32', 'i32'], proxy_on_response_headers: ['i32 i32 i32', 'i32'],
  proxy_on_response_body: ['i32 i32 i32', 'i32'], proxy_on_response_trailers: ['i32 i32', 'i32'],
  proxy_on_http_call_response: ['i32 i32 i32 i32 i32', ''], proxy_on_log: ['i32', ''],
  proxy_on_done: ['i32', 'i32'], proxy_on_delete: ['i32', ''], proxy_on_tick: ['i32', ''],
  proxy_on_queue_ready: ['i32 i32', ''],
};

const words = (s) => s.split(' ').filter(Boolean);
const same = (a, b) => a.join(' ') === words(b).join(' ');

// check fails like Envoy's loader on what it would refuse.
function check(bytes) {
  const { imports, exports } = wasmfile.parse(bytes);
  if (!exports.has('proxy_abi_version_0_2_0')) {
    if (exports.has('proxy_abi_version_0_2_1') || exports.has('proxy_abi_version_0_1_0')) {
      throw new Error('v8host: only ABI 0.2.0 (what the Go SDK exports) is supported');
    }
    throw new Error('Missing or unknown Proxy-Wasm ABI version');
  }
  if (!exports.has('malloc') && !exports.has('proxy_on_memory_allocate')) throw new Error('Wasm module is missing malloc function.');
  for (const imp of imports) {
    if (imp.kind === 'memory' || imp.kind === 'table') continue;
    const key = (imp.module === 'wasi_unstable' ? 'wasi_snapshot_preview1' : imp.module) + '.' + imp.name;
    const sig = hostSigs.get(key);
    if (imp.kind !== 'func' || !sig) {
      throw new Error(`Failed to load Wasm module due to a missing import: ${imp.module}.${imp.name}`);
    }
    if (!same(imp.params, sig[0]) || !same(imp.results, sig[1])) {
      throw new Error(`Failed to load Wasm module due to an import type mismatch for ${imp.module}.${imp.name}, ` +
        `want: ${wasmfile.sigText(imp.params)} -> ${wasmfile.sigText(imp.results)}, ` +
        `but host exports: ${wasmfile.sigText(words(sig[0]))} -> ${wasmfile.sigText(words(sig[1]))}`);
    }
  }
  for (const [name, [params, results]] of Object.entries(exportSigs)) {
    const e = exports.get(name);
    if (e && e.kind === 'func' && (!same(e.params, params) || !same(e.results, results))) {
      throw new Error(`Bad function signature for: ${name}`);
    }
  }
}

class Plugin {
  // cfg: {vmId, pluginName, rootId, pluginConfig (binary string), vmConfig, workers, env, failOpen,
  // properties, node, logLevel, clock, proc, module (a compiled WebAssembly.Module, optional), onPhase,
  // bufferLimit (the most body bytes buffered for the filter, stream.js)}.
  // Nothing runs until load.
  constructor(cfg) {
    this.cfg = Object.assign({ vmId: '', pluginName: '', rootId: '', pluginConfig: '', workers: 1, logLevel: LogLevel.trace }, cfg);
    this.clock = cfg.clock || new Clock(1700000000000000000n);
    this.proc = cfg.proc || new Process();
    this.environ = Object.entries(cfg.env || {}).map(([k, v]) => `${k}=${v}`).sort();
    this.logs = [];
    this.pollCalls = 0;
    this.vms = [];
  }

  // load checks and compiles bytes (unless cfg.module is given) and starts the VMs; it throws with
  // Envoy's message when Envoy would refuse the filter. The log keeps what the canary said.
  load(bytes) {
    const phase = this.cfg.onPhase || (() => {});
    check(bytes);
    this.module = this.cfg.module || new WebAssembly.Module(bytes);
    phase('compile', BASE_VM);
    this.start(phase);
    return this;
  }

  start(phase) {
    const base = new VM(this, BASE_VM);
    const err = base.boot(false, (p) => phase(p, BASE_VM));
    if (err) throw new Error(`Failed to start base Wasm VM: ${err}`);
    const canary = new VM(this, CANARY_VM);
    const cerr = canary.boot(true, (p) => phase(p, CANARY_VM));
    canary.close(); // killed without proxy_on_done/proxy_on_delete
    if (cerr) throw new Error(`Unable to create Wasm HTTP filter ${this.cfg.pluginName}: ${cerr}`);
    for (let i = 0; i <= this.cfg.workers; i++) {
      const vm = new VM(this, i);
      this.vms.push(vm);
      const verr = vm.boot(true);
      if (verr && !vm.failed) {
        vm.failed = verr;
        this.log(i, LogLevel.critical, verr);
      }
      phase('worker', i);
    }
  }

  log(vm, level, message) {
    if (level < this.cfg.logLevel) return;
    if (this.logs.length >= 100000) this.logs.splice(0, 50000);
    this.logs.push({ vm, level: levelNames[level] || 'unknown', message });
  }

  close() {
    for (const vm of this.vms) vm.close();
  }
}

module.exports = { Plugin, Process, Clock, check, BASE_VM, CANARY_VM };
