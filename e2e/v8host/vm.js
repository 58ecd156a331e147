'use strict';
// One instance of the plugin's module: a thread VM (one per worker plus the main-thread VM), the
// canary or the base VM. A trap, a restricted callback or proc_exit fails the whole VM: later streams on
// it get a 503 local reply "wasm_fail_stream" (or pass when the plugin is fail-open).
const { Status, Errno, LogLevel, Memory } = require('./abi');
const wasi = require('./wasi');
const env = require('./env');

class RestrictedCallback extends Error {
  constructor(fn) {
    super(`restricted_callback (${fn})`);
    this.fn = fn;
  }
}

class VM {
  constructor(plugin, index) {
    this.plugin = plugin;
    this.index = index;
    this.failed = null;
    this.closed = false;
    this.rootId = 0;
    this.nextId = 0;
    this.streams = new Map();
    this.current = 0; // context of the guest call in progress
    this.effective = 0; // set by proxy_set_effective_context
    this.allowed = null; // allow-list of the restricted window in force
    this.allocs = 0; // guest allocations made by the host call in progress
    this.stopNext = false; // a local reply forces the current callback to stop
    this.deferred = []; // effects applied after the guest call returns
    this.configuring = false; // the plugin configuration is readable during proxy_on_configure
    this.filterState = new Map();
    this.metrics = []; // metric id >> 2 → process metric
    this.tickPeriod = 0n;
    this.tickNext = 0n;
    this.hostCalls = 0;
    this.guestAllocs = 0;
    this.guestCalls = 0; // calls into the guest's exports, allocator included
    this.callsByName = new Map(); // host calls by "module.name"
    this.instance = new WebAssembly.Instance(plugin.module, this.imports());
    this.ex = this.instance.exports;
    this.mem = new Memory(this.ex.memory);
    this.malloc = this.ex.malloc || this.ex.proxy_on_memory_allocate;
  }

  // imports builds the env, wasi_snapshot_preview1 and wasi_unstable objects bound to this VM.
  imports() {
    const wasiObj = {};
    for (const [name, , , impl] of wasi.functions) {
      wasiObj[name] = this.wrap('wasi_snapshot_preview1.' + name, impl, Errno.INVAL);
    }
    const envObj = {};
    for (const [name, , impl] of env.functions.concat(env.voidFunctions)) {
      envObj[name] = this.wrap('env.' + name, impl, Status.InvalidMemoryAccess);
    }
    return { env: envObj, wasi_snapshot_preview1: wasiObj, wasi_unstable: wasiObj };
  }

  // wrap counts the call, enforces the restricted window in force, and turns a bad guest pointer into
  // the function's "invalid memory" answer.
  wrap(key, impl, badMemory) {
    const vm = this;
    return function hostCall(a, b, c, d, e, f, g, h, i, j) {
      vm.hostCalls++;
      vm.callsByName.set(key, (vm.callsByName.get(key) || 0) + 1);
      if (vm.allowed && !vm.allowed.has(key)) throw new RestrictedCallback(key);
      const prev = vm.allocs;
      vm.allocs = 0;
      try {
        return impl(vm, a, b, c, d, e, f, g, h, i, j);
      } catch (err) {
        if (err instanceof RangeError) return badMemory;
        throw err;
      } finally {
        vm.allocs = prev;
      }
    };
  }

  // call invokes export name as the guest call of context ctxId and returns its result, or undefined
  // when the export is missing or the call failed (the VM is then failed).
  call(name, ctxId, a, b, c) {
    const fn = this.ex[name];
    if (!fn || this.failed || this.closed) return undefined;
    const prevCurrent = this.current;
    const prevEffective = this.effective;
    this.current = ctxId;
    this.effective = 0;
    this.guestCalls++;
    try {
      const r = fn(a, b, c);
      return r === undefined ? 0 : r;
    } catch (err) {
      this.fail(name, err);
      return undefined;
    } finally {
      this.current = prevCurrent;
      this.effective = prevEffective;
    }
  }

  fail(fn, err) {
    if (this.failed) return;
    const what = err instanceof WebAssembly.RuntimeError ? 'RuntimeError' : 'Error';
    this.failed = `Function: ${fn} failed: Uncaught ${what}: ${err.message}`;
    this.plugin.log(this.index, LogLevel.critical, this.failed);
    this.deferred = [];
  }

  // alloc re-enters the guest's allocator inside the malloc window; never twice in one host call.
  alloc(size) {
    if (this.allocs > 0) throw new Error('v8host: two guest allocations in one host call');
    this.allocs++;
    this.guestAllocs++;
    this.guestCalls++;
    const saved = this.allowed;
    this.allowed = wasi.mallocAllowed;
    try {
      return this.malloc(size) >>> 0;
    } finally {
      this.allowed = saved;
    }
  }

  // copyOut copies a binary string or bytes into a fresh guest allocation and writes its address and
  // size; empty data writes 0 and 0 without allocating, like cpp-host's copyToPointerSize.
  copyOut(data, ptrPtr, sizePtr) {
    let ptr = 0;
    if (data.length > 0) {
      ptr = this.alloc(data.length);
      if (ptr === 0) return Status.InvalidMemoryAccess;
      if (typeof data === 'string') this.mem.writeStr(ptr, data);
      else this.mem.write(ptr, data);
    }
    this.mem.setU32(ptrPtr, ptr);
    this.mem.setU32(sizePtr, data.length);
    return Status.OK;
  }

  // stream returns the stream of the effective (or current) context; undefined for the root context.
  stream() {
    const id = this.effective || this.current;
    return id === this.rootId ? undefined : this.streams.get(id);
  }

  metric(id) { return this.metrics[id >>> 2] && (this.metrics[id >>> 2].type === (id & 3)) ? this.metrics[id >>> 2] : undefined; }

  // headerMap returns header map t of the effective context, undefined when it is not available now.
  headerMap(t) {
    const st = this.stream();
    if (!st) return undefined;
    switch (t) {
      case 0: return st.open.reqHeaders ? st.reqHeaders : undefined;
      case 1: return st.open.reqTrailers ? st.reqTrailers : undefined;
      case 2: return st.open.respHeaders ? st.respHeaders : undefined;
      case 3: return st.open.respTrailers ? st.respTrailers : undefined;
    }
    return undefined;
  }

  // buffer returns buffer t (a binary string), undefined when Envoy has none.
  buffer(t) {
    const st = this.stream();
    switch (t) {
      case 0: return st && st.open.reqBody ? st.bodyView(0) : undefined;
      case 1: return st && st.open.respBody ? st.bodyView(1) : undefined;
      case 6: return this.plugin.cfg.vmConfig || '';
      case 7: return this.configuring ? this.plugin.cfg.pluginConfig : undefined;
    }
    return undefined;
  }

  // boot runs _initialize inside the start window and, for a plugin VM, creates the root context and
  // calls proxy_on_vm_start and proxy_on_configure. It returns an error message or null.
  boot(plugin, phase = () => {}) {
    this.allowed = wasi.startAllowed;
    if (this.ex._initialize) {
      this.call('_initialize', 0);
      if (this.ex.main) this.call('main', 0, 0, 0);
      else if (this.ex.__main_void) this.call('__main_void', 0);
    } else if (this.ex._start) {
      this.call('_start', 0);
    }
    this.allowed = null;
    phase('_initialize');
    if (this.failed || !plugin) return this.failed;
    this.rootId = ++this.nextId;
    this.call('proxy_on_context_create', this.rootId, this.rootId, 0);
    if (this.call('proxy_on_vm_start', this.rootId, this.rootId, (this.plugin.cfg.vmConfig || '').length) === 0) {
      return 'Failed to configure base Wasm plugin: proxy_on_vm_start returned false';
    }
    phase('proxy_on_vm_start');
    this.configuring = true;
    const ok = this.call('proxy_on_configure', this.rootId, this.rootId, this.plugin.cfg.pluginConfig.length);
    this.configuring = false;
    phase('proxy_on_configure');
    if (ok === 0) return 'Failed to configure base Wasm plugin: proxy_on_configure returned false';
    this.deferred = [];
    return this.failed;
  }

  runDeferred() {
    while (this.deferred.length) this.deferred.shift()();
  }

  fireTick() {
    if (this.failed || this.closed) {
      this.plugin.clock.setTimer(this, 0n);
      return;
    }
    this.call('proxy_on_tick', this.rootId, this.rootId);
    this.runDeferred();
    if (this.failed) this.plugin.clock.setTimer(this, 0n);
  }

  close() {
    this.closed = true;
    this.plugin.clock.setTimer(this, 0n);
  }
}

module.exports = { VM };
