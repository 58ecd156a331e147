'use strict';
// The request lifecycle benchmark and the cold-start measurement on V8.
//
// Lifecycle: one whole request (context create, request headers, response headers and body, log, done,
// delete) through the pass-through module (the floor) and through meshlimit allowed with quota
// headers, allowed without them, and denied, then three cases that read the response. The cases run alternated, batch by batch, in one warm
// process, and are timed in CPU time (process.cpuUsage), so that their ratios mean something on a
// shared machine. Host calls, guest calls (exports and the allocator) and guest allocations are
// counted per request; they are deterministic.
//
// Cold start: Envoy's start sequence for one plugin, phase by phase, in a fresh process.
const fs = require('fs');
const { Plugin } = require('./plugin');
const { roundTrip } = require('./stream');
const { LogLevel } = require('./abi');
const { upstream } = require('./scenario');

const rule = (rate, extra = '') => `{"rules":[{"name":"per-ip","key":["client_ip"],"limits":[{"rate":"${rate}"}]}]${extra}}`;

const countOn = '{"rules":[{"name":"per-ip","key":["client_ip"],"limits":[{"rate":"1000000000/s"}],"count_on":{"status":["401"],"penalty":"1m"}}]}';
const settleHeader = '{"rules":[{"name":"per-ip","key":["client_ip"],"limits":[{"rate":"1000000000/s"}],"cost":{"default":1,"max":100,"settle":{"response_header":"x-cost"}}}]}';
const answer = (status, extra) => ({ headers: [[':status', status], ['content-type', 'text/plain'], ...extra], body: 'ok' });

const cases = [
  { name: 'passthrough', module: 'passthrough', config: '{}' },
  { name: 'meshlimit/allowed', module: 'meshlimit', config: rule('1000000000/s') },
  { name: 'meshlimit/allowed-no-quota-headers', module: 'meshlimit', config: rule('1000000000/s', ',"response":{"quota_headers_on_allowed":false}') },
  { name: 'meshlimit/denied', module: 'meshlimit', config: rule('1/h') },
  // Reading the response (e2e/lifecycle_bench_test.go's lifecycleResponseCases, in the same order):
  // count_on with an answer it does not count, with a 401 it counts, and a reservation of 1 settled
  // from a response header saying 3.
  { name: 'meshlimit/countonpass', module: 'meshlimit', config: countOn },
  { name: 'meshlimit/counted401', module: 'meshlimit', config: countOn, resp: answer('401', []) },
  { name: 'meshlimit/settleheader', module: 'meshlimit', config: settleHeader, resp: answer('200', [['x-cost', '3']]) },
];

const benchRequest = {
  headers: [[':method', 'GET'], [':path', '/api/items?page=2'], [':authority', 'bench.example'], [':scheme', 'http'], ['user-agent', 'bench']],
  info: { source: '203.0.113.77:40000' },
};

function cpuNs() {
  const u = process.cpuUsage();
  return (u.user + u.system) * 1000;
}

// lifecycle runs rounds × batch requests per case and returns the figures per request.
function lifecycle(wasm, rounds, batch) {
  const modules = {};
  const states = cases.map((c) => {
    const bytes = fs.readFileSync(wasm[c.module]);
    modules[c.module] = modules[c.module] || new WebAssembly.Module(bytes);
    const p = new Plugin({ vmId: c.module, rootId: c.module, pluginConfig: c.config, workers: 1, logLevel: LogLevel.info, module: modules[c.module] }).load(bytes);
    return { c, p, vm: p.vms[0], cpu: 0, wall: 0n, n: 0, perRound: [] };
  });
  for (const s of states) for (let i = 0; i < 2000; i++) roundTrip(s.vm, benchRequest, s.c.resp || upstream); // warm up
  const counts = states.map((s) => [s.vm.hostCalls, s.vm.guestCalls, s.vm.guestAllocs, new Map(s.vm.callsByName)]);
  for (let r = 0; r < rounds; r++) {
    for (const s of states) {
      const c0 = cpuNs();
      const w0 = process.hrtime.bigint();
      for (let i = 0; i < batch; i++) roundTrip(s.vm, benchRequest, s.c.resp || upstream);
      const cpu = cpuNs() - c0;
      s.wall += process.hrtime.bigint() - w0;
      s.cpu += cpu;
      s.n += batch;
      s.perRound.push(cpu / batch);
    }
  }
  return states.map((s, i) => {
    if (s.vm.failed) throw new Error(`${s.c.name}: ${s.vm.failed}`);
    const median = s.perRound.sort((a, b) => a - b)[s.perRound.length >> 1];
    return {
      name: s.c.name,
      cpu_ns: median,
      wall_ns: Number(s.wall) / s.n,
      hostcalls: (s.vm.hostCalls - counts[i][0]) / s.n,
      guestcalls: (s.vm.guestCalls - counts[i][1]) / s.n,
      guestallocs: (s.vm.guestAllocs - counts[i][2]) / s.n,
      guest_mib: s.vm.mem.size() / (1 << 20),
      hostcalls_by_name: Object.fromEntries([...s.vm.callsByName]
        .map(([k, v]) => [k, (v - (counts[i][3].get(k) || 0)) / s.n]).filter(([, v]) => v > 0)),
    };
  });
}

// coldStart loads one plugin and times each phase of Envoy's start sequence, then the first two
// requests on worker 0. Times are milliseconds since the previous mark: wall time (ms) and the
// process's CPU time (cpu_ms), which a busy machine inflates less. With stopAfter, the process
// exits once that phase is done (coldbytes.js counts what each phase compiled).
function coldStart(wasmPath, config, workers, stopAfter) {
  const marks = [];
  let last = process.hrtime.bigint();
  let lastCpu = cpuNs();
  const mark = (what) => {
    const now = process.hrtime.bigint();
    const cpu = cpuNs();
    marks.push({ phase: what, ms: Number(now - last) / 1e6, cpu_ms: (cpu - lastCpu) / 1e6 });
    if (what === stopAfter) process.exit(0);
    last = now;
    lastCpu = cpu;
  };
  const bytes = fs.readFileSync(wasmPath);
  mark('read the file');
  const names = { '-2': 'base VM', '-1': 'canary' };
  const p = new Plugin({
    vmId: 'meshlimit', rootId: 'meshlimit', pluginName: 'istio-system.meshlimit', pluginConfig: config, workers, logLevel: LogLevel.info,
    onPhase: (phase, vm) => mark(phase === 'compile' ? 'compile (check imports, WebAssembly.Module)' :
      phase === 'worker' ? `thread VM ${vm}: instantiate, _initialize, on_vm_start, on_configure` :
        `${names[vm]}: ${phase === '_initialize' ? 'instantiate + _initialize' : phase}`),
  }).load(bytes);
  roundTrip(p.vms[0], benchRequest, upstream);
  mark('first request on worker 0');
  roundTrip(p.vms[0], benchRequest, upstream);
  mark('second request on worker 0');
  const total = marks.reduce((n, m) => n + m.ms, 0);
  const totalCpu = marks.reduce((n, m) => n + m.cpu_ms, 0);
  return { marks, total_ms: total, total_cpu_ms: totalCpu, failed: p.vms.filter((vm) => vm.failed).length };
}

// coldRuns runs coldStart in runs fresh node processes per module, alternating the modules run by
// run (so that a change in the machine's load falls on all of them), and returns per module the
// median of each phase's wall and CPU time. A phase's medians do not add up to the median total.
function coldRuns(wasmPaths, runs, workers) {
  const { execFileSync } = require('child_process');
  const per = wasmPaths.map(() => []);
  for (let r = 0; r < runs; r++) {
    wasmPaths.forEach((w, i) => {
      const out = execFileSync(process.execPath, [...process.execArgv, process.argv[1], 'coldstart-json', w, String(workers)]);
      per[i].push(JSON.parse(out));
    });
  }
  const median = (xs) => xs.slice().sort((a, b) => a - b)[xs.length >> 1];
  return wasmPaths.map((w, i) => ({
    module: w,
    bytes: fs.statSync(w).size,
    failed: Math.max(...per[i].map((x) => x.failed)),
    marks: per[i][0].marks.map((m, j) => ({
      phase: m.phase, ms: median(per[i].map((x) => x.marks[j].ms)), cpu_ms: median(per[i].map((x) => x.marks[j].cpu_ms)),
    })),
    total_ms: median(per[i].map((x) => x.total_ms)),
    total_cpu_ms: median(per[i].map((x) => x.total_cpu_ms)),
  }));
}

module.exports = { lifecycle, coldStart, coldRuns, cases };

// profile samples the CPU while one case runs n warm requests and returns the functions with the most
// self time (guest functions by their Go names, host functions by file and line), in percent.
function profile(wasm, caseName, n, top) {
  const inspector = require('inspector');
  const c = cases.find((x) => x.name === caseName);
  if (!c) throw new Error(`unknown case ${caseName}; one of ${cases.map((x) => x.name).join(', ')}`);
  const bytes = fs.readFileSync(wasm[c.module]);
  const p = new Plugin({ vmId: c.module, rootId: c.module, pluginConfig: c.config, workers: 1, logLevel: LogLevel.info }).load(bytes);
  for (let i = 0; i < 5000; i++) roundTrip(p.vms[0], benchRequest, upstream);
  const session = new inspector.Session();
  session.connect();
  let result;
  session.post('Profiler.enable', () => {});
  session.post('Profiler.setSamplingInterval', { interval: 50 }, () => {});
  session.post('Profiler.start', () => {});
  for (let i = 0; i < n; i++) roundTrip(p.vms[0], benchRequest, upstream);
  session.post('Profiler.stop', (err, { profile: prof }) => {
    if (err) throw err;
    result = selfTimes(prof, top);
  });
  session.disconnect();
  return result;
}

function selfTimes(prof, top) {
  const byId = new Map(prof.nodes.map((node) => [node.id, node]));
  const self = new Map();
  let total = 0;
  prof.samples.forEach((id, i) => {
    const f = byId.get(id).callFrame;
    const where = f.url.startsWith('wasm://') ? 'guest' : `${f.url.split('/').pop()}:${f.lineNumber + 1}`;
    const key = `${f.functionName || '(anonymous)'}  [${where}]`;
    self.set(key, (self.get(key) || 0) + prof.timeDeltas[i]);
    total += prof.timeDeltas[i];
  });
  return [...self].sort((a, b) => b[1] - a[1]).slice(0, top).map(([k, v]) => ({ pct: (100 * v) / total, fn: k }));
}

module.exports.profile = profile;
