'use strict';
// The instruction-count benchmark (scripts/bench-instructions.js) on V8. For every case of the case
// file: load its module with its configuration, then run the warm-up, n1 and n2 requests, each loop
// between callgrind's ZERO_STATS and DUMP_STATS client requests (the addon build/callgrind.node,
// scripts/callgrind-node.c). Under valgrind --tool=callgrind each loop is one dump file holding the
// instructions of that loop only, on every thread (the JS host, the guest, V8's collector and
// compiler threads), and (Ir(n2) - Ir(n1)) / (n2 - n1) is one warm request. It prints one line per
// loop ("instr CASE N STATUS", the order of the dumps), the same protocol as the wazero side
// (e2e/instructions_bench_test.go).
//
//   node --no-liftoff --wasm-max-mem-pages=16384 e2e/v8host/main.js instr CASES.json ADDON
const fs = require('fs');
const { Plugin } = require('./plugin');
const { roundTrip } = require('./stream');
const { LogLevel } = require('./abi');

// instr runs every case of the file casesPath; addonPath is build/callgrind.node.
function instr(casesPath, addonPath) {
  const cg = require(require('path').resolve(addonPath));
  const spec = JSON.parse(fs.readFileSync(casesPath, 'utf8'));
  const req = { headers: spec.request.headers, info: { source: spec.request.source } };
  const modules = new Map();
  const lines = [];
  for (const c of spec.cases) {
    const resp = { headers: c.response.headers, body: c.response.body };
    const bytes = fs.readFileSync(c.module);
    if (!modules.has(c.module)) modules.set(c.module, new WebAssembly.Module(bytes));
    const p = new Plugin({ vmId: 'meshlimit', rootId: 'meshlimit', pluginConfig: c.config, workers: 1, logLevel: LogLevel.info, module: modules.get(c.module) }).load(bytes);
    const vm = p.vms[0];
    for (const n of [spec.warm, spec.n1, spec.n2]) {
      let s;
      cg.zeroStats();
      for (let i = 0; i < n; i++) s = roundTrip(vm, req, resp);
      cg.dumpStats();
      lines.push(`instr ${c.name} ${n} ${s.local ? s.local.status : 0}`);
    }
    if (vm.failed) throw new Error(`${c.name}: ${vm.failed}`);
  }
  return lines;
}

module.exports = { instr };
