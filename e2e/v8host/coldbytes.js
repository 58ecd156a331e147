'use strict';
// coldBytes: the code TurboFan compiles during the cold start, phase by phase, a figure that does not
// depend on the machine's load. V8 compiles a function of the module on its first call (lazy
// compilation; Envoy's flags leave no baseline tier), so the cold start's CPU time follows the bytes of
// the function bodies its phases call for the first time. For each stop, a fresh node process runs the
// start sequence (bench.js's coldStart) with --trace-wasm-compilation-times and exits after that phase;
// a phase's functions are those compiled by its stop and not by the one before. The name section names
// them, and their package is the part of a Go name before its first dot.
const { execFileSync } = require('child_process');
const fs = require('fs');

// stops are the phases after which a process exits, and the label of what each adds.
const stops = [
  { after: 'base VM: instantiate + _initialize', label: '_initialize (base VM)' },
  { after: 'canary: proxy_on_configure', label: 'canary: on_vm_start, proxy_on_configure' },
  { after: 'second request on worker 0', label: 'thread VMs, first two requests' },
];

// compiled runs one process to the stop and returns Map(function index → body bytes).
function compiled(wasm, stop) {
  const args = [...process.execArgv, '--trace-wasm-compilation-times', process.argv[1], 'coldstart-stop', wasm, stop];
  const out = execFileSync(process.execPath, args, { maxBuffer: 256 << 20 }).toString();
  const fns = new Map();
  for (const m of out.matchAll(/^Compiled function \S+#(\d+) using TurboFan.*bodysize (\d+)/gm)) fns.set(Number(m[1]), Number(m[2]));
  return fns;
}

// functionNames reads the function names of the module's name section (subsection 1).
function functionNames(bytes) {
  const names = new Map();
  for (const sec of WebAssembly.Module.customSections(new WebAssembly.Module(bytes), 'name')) {
    const b = Buffer.from(sec);
    let p = 0;
    const u32 = () => {
      let v = 0;
      for (let shift = 0; ; shift += 7) {
        const c = b[p++];
        v += (c & 0x7f) * 2 ** shift;
        if (!(c & 0x80)) return v;
      }
    };
    while (p < b.length) {
      const id = b[p++];
      const end = u32() + p;
      if (id === 1) {
        for (let n = u32(); n > 0; n--) {
          const idx = u32();
          const len = u32();
          names.set(idx, b.toString('utf8', p, p + len));
          p += len;
        }
      }
      p = end;
    }
  }
  return names;
}

const packageOf = (name) => (name.match(/^(github\.com_[^.]*|[^.]*)/) || ['', '?'])[1].replace(/^github\.com_meshlimit_meshlimit_/, 'meshlimit/')
  .replace(/^github\.com_tetratelabs_proxy_wasm_go_sdk_/, 'sdk/');

// coldBytes returns, per module, per phase: the functions compiled, their body bytes, and the
// packages with the most bytes (top of them).
function coldBytes(wasmPaths, top) {
  return wasmPaths.map((wasm) => {
    const names = functionNames(fs.readFileSync(wasm));
    const before = new Map();
    const phases = stops.map((s) => {
      const now = compiled(wasm, s.after);
      const byPkg = new Map();
      let fns = 0;
      let bytes = 0;
      for (const [idx, size] of now) {
        if (before.has(idx)) continue;
        before.set(idx, size);
        fns++;
        bytes += size;
        const pkg = packageOf(names.get(idx) || '?');
        byPkg.set(pkg, (byPkg.get(pkg) || 0) + size);
      }
      const pkgs = [...byPkg].sort((a, b) => b[1] - a[1]).slice(0, top);
      return { phase: s.label, functions: fns, bytes, packages: pkgs };
    });
    return { module: wasm, phases, bytes: phases.reduce((n, p) => n + p.bytes, 0), functions: phases.reduce((n, p) => n + p.functions, 0) };
  });
}

module.exports = { coldBytes, stops };
