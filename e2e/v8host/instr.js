'use strict';
// The instruction-count benchmark (scripts/bench-instructions.js) on V8. For every case of the case
// file: load its module with its configuration, warm it up, then run n1 and n2 requests. Each loop
// runs between the addon's start() and stop() (build/callgrind.node, scripts/callgrind-node.c:
// zero the counters and collect on this thread only, then dump). Under valgrind --tool=callgrind --collect-atstart=no
// --separate-threads=yes each loop is one dump of the main thread holding the instructions of that
// loop only: the JS host and the guest, and V8's compiler and collector, which --single-threaded
// keeps on this thread. (Ir(n2) - Ir(n1)) / (n2 - n1) is one warm request.
//
// The warm-up is spec.warm requests, then loops of n2 - n1 requests until the last two cost the
// same within spec.stable (their dumps read back from DUMPS.K-01): V8 optimises the JS host's
// functions as they get hot, and a loop that compiles one costs more than the next. It stops at
// spec.maxWarm requests whatever the figures. It prints one line per loop ("instr CASE N STATUS",
// the order of the dumps; the last two of a case are n1 and n2), the protocol of the wazero side
// (e2e/instructions_bench_test.go).
//
// Run under valgrind with --instr-atstart=no (scripts/bench-instructions.js), a case's loading
// (compiling the module, _initialize, proxy_on_configure: V8 compiles each wasm function with
// TurboFan on its first call) and its first spec.warm requests run uninstrumented, at valgrind's
// bare speed; instrumentation is on from the first stability loop to the n2 loop, and off again
// before the next case. A warm request executes the same code either way: instrumentation is
// valgrind's, not V8's, and the stability loops are instrumented before n1 and n2 are counted
// (docs/performance.md, "Instruction counts"). spec.instrument 'all' (with --instr-atstart=yes)
// leaves instrumentation alone: the whole process is instrumented, the method before.
//
//   node --no-liftoff --wasm-max-mem-pages=16384 --single-threaded e2e/v8host/main.js instr CASES.json ADDON [DUMPS]
const fs = require('fs');
const { Plugin } = require('./plugin');
const { roundTrip } = require('./stream');
const { LogLevel } = require('./abi');

// countFlags are the flags instr needs beside Envoy's: V8's compiler and collector on the measured
// thread (no background task whose work would land in a loop it does not belong to, or in none).
// No forced collection between loops: a full collection makes V8 optimise the JS host's functions
// again in every other loop (17k instructions a request more on the floor, loop after loop).
const countFlags = ['--single-threaded'];

// loop sends req n times through vm with resp as the upstream's answer and returns the status of
// the last local reply (0: forwarded upstream).
function loop(vm, req, resp, n) {
  let s;
  for (let i = 0; i < n; i++) s = roundTrip(vm, req, resp);
  return s.local ? s.local.status : 0;
}

// counter runs the loops of one process and reads their dumps back: dumps is the callgrind output
// prefix ('' outside valgrind: nothing to read).
function counter(cg, dumps) {
  let k = 0;
  return {
    // run runs one loop between start() and stop() and returns its status.
    run(vm, req, resp, n) {
      cg.start();
      const status = loop(vm, req, resp, n);
      cg.stop();
      k++;
      return status;
    },
    // last is the count of the last loop's dump, or NaN without one.
    last() {
      if (!dumps) return NaN;
      const m = /^summary: (\d+)$/m.exec(fs.readFileSync(`${dumps}.${k}-01`, 'utf8'));
      return m ? Number(m[1]) : NaN;
    },
  };
}

// warmUp runs the warm-up of one case, printing a line per loop into lines: the first spec.warm
// requests uninstrumented, then instrumentation on (cg.instrument) for the stability loops, which
// stays on for n1 and n2.
function warmUp(cg, ctr, spec, name, vm, req, resp, lines) {
  const chunk = spec.n2 - spec.n1;
  let ran = spec.warm;
  lines.push(`instr ${name} ${spec.warm} ${ctr.run(vm, req, resp, spec.warm)}`);
  if (spec.instrument !== 'all') cg.instrument(true);
  let prev = NaN;
  while (ran + chunk <= spec.maxWarm) {
    lines.push(`instr ${name} ${chunk} ${ctr.run(vm, req, resp, chunk)}`);
    ran += chunk;
    const cur = ctr.last();
    if (Number.isNaN(cur) || Math.abs(cur - prev) <= spec.stable * cur) return;
    prev = cur;
  }
}

// instr runs every case of the file casesPath; addonPath is build/callgrind.node, dumps the
// callgrind output prefix (--callgrind-out-file).
function instr(casesPath, addonPath, dumps) {
  const missing = countFlags.filter((f) => !process.execArgv.includes(f));
  if (missing.length) throw new Error(`instr needs node ${countFlags.join(' ')} (missing ${missing.join(' ')})`);
  const cg = require(require('path').resolve(addonPath));
  const spec = JSON.parse(fs.readFileSync(casesPath, 'utf8'));
  const ctr = counter(cg, cg.onValgrind() ? dumps : '');
  const req = { headers: spec.request.headers, info: { source: spec.request.source } };
  const modules = new Map();
  const lines = [];
  for (const c of spec.cases) {
    const resp = { headers: c.response.headers, body: c.response.body };
    const bytes = fs.readFileSync(c.module);
    if (!modules.has(c.module)) modules.set(c.module, new WebAssembly.Module(bytes));
    const p = new Plugin({ vmId: 'meshlimit', rootId: 'meshlimit', pluginConfig: c.config, workers: 1, logLevel: LogLevel.info, module: modules.get(c.module) }).load(bytes);
    const vm = p.vms[0];
    warmUp(cg, ctr, spec, c.name, vm, req, resp, lines);
    for (const n of [spec.n1, spec.n2]) lines.push(`instr ${c.name} ${n} ${ctr.run(vm, req, resp, n)}`);
    if (spec.instrument !== 'all') cg.instrument(false);
    if (vm.failed) throw new Error(`${c.name}: ${vm.failed}`);
  }
  return lines;
}

module.exports = { instr };
