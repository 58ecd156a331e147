'use strict';
// What one Envoy process shares among all its Wasm VMs: the shared-data store (one namespace per
// vm_id) with Envoy's compare-and-swap rules, and the stats store. Also the virtual clock that drives
// WASI clocks, proxy_get_current_time_nanoseconds, request.time and the per-VM tick timers.
const { Status } = require('./abi');

class Process {
  constructor() {
    this.data = new Map(); // vm_id → Map(key → {value, cas})
    this.nextCas = 1;
    this.metrics = new Map(); // name → {type, value (BigInt)}
  }

  // getShared returns {value, cas} or undefined (NotFound) for a missing key or namespace.
  getShared(vmId, key) {
    const ns = this.data.get(vmId);
    return ns && ns.get(key);
  }

  // setShared stores value unless the key exists and cas is non-zero and differs from the stored cas
  // (CasMismatch). A missing key is created whatever cas was passed. Every store takes a fresh cas from
  // one process-wide counter that starts at 1 and skips 0.
  setShared(vmId, key, value, cas) {
    let ns = this.data.get(vmId);
    if (!ns) this.data.set(vmId, (ns = new Map()));
    const old = ns.get(key);
    if (old && cas !== 0 && cas !== old.cas) return Status.CasMismatch;
    ns.set(key, { value, cas: this.nextCas });
    this.nextCas = (this.nextCas + 1) >>> 0 || 1;
    return Status.OK;
  }

  // metric returns the process-wide metric of that name and type, creating it; a name defined again
  // with another type is a separate stat, as in Envoy.
  metric(name, type) {
    let m = this.metrics.get(name);
    if (m && m.type !== type) {
      name += '#' + ['counter', 'gauge', 'histogram'][type];
      m = this.metrics.get(name);
    }
    if (!m) this.metrics.set(name, (m = { type, value: 0n }));
    return m;
  }

  // counters returns every counter and gauge by name, as Numbers.
  metricValues() {
    const out = {};
    for (const [name, m] of this.metrics) if (m.type !== 2) out[name] = Number(m.value);
    return out;
  }
}

const monotonicBase = 1000000000n; // keeps the monotonic clock away from 0

// Clock is virtual time in nanoseconds (BigInt). It moves only in advance, which fires every tick that
// falls due on the way, in time order, with the clock reading the tick's due time; a timer is re-armed
// one period after its tick returns (a fixed delay), and the first tick comes one period after it is set.
class Clock {
  constructor(startNs) {
    this.start = startNs;
    this.now = startNs;
    this.timers = []; // VMs with a tick period, in the order they set it
  }

  monotonic() { return monotonicBase + this.now - this.start; }

  setTimer(vm, periodNs) {
    vm.tickPeriod = periodNs;
    vm.tickNext = this.now + periodNs;
    const i = this.timers.indexOf(vm);
    if (periodNs <= 0n && i >= 0) this.timers.splice(i, 1);
    if (periodNs > 0n && i < 0) this.timers.push(vm);
  }

  advance(ns) {
    const target = this.now + (ns > 0n ? ns : 0n);
    for (;;) {
      let best = null;
      for (const vm of this.timers) {
        if (vm.tickPeriod > 0n && vm.tickNext <= target && (!best || vm.tickNext < best.tickNext)) best = vm;
      }
      if (!best) break;
      if (best.tickNext > this.now) this.now = best.tickNext;
      best.fireTick();
      if (best.tickPeriod > 0n) best.tickNext = this.now + best.tickPeriod;
    }
    this.now = target;
  }
}

module.exports = { Process, Clock };
