'use strict';
// bench-instructions: instructions per request of the filter's request lifecycle on wazero and on
// V8, counted by valgrind --tool=callgrind, printed as markdown tables (`make bench-instructions`).
//
//   node scripts/bench-instructions.js [--against OTHER.wasm] [--n1 N] [--n2 N] [--warm N]
//     [--runs N] [--jobs N] [--only CASE,CASE] [--engines wazero,v8] [--instrument measured|all]
//     [--out DIR]
//
// It writes the cases to build/instr/cases.json (the same file drives both engines) and runs, side
// by side, the e2e test binary's BenchmarkInstructionsWazero and e2e/v8host/main.js instr under
// callgrind. Each engine's process loads every case, warms it up, then runs a loop of n1 and one of
// n2 requests, each between callgrind client requests that zero the counters and dump them (Go:
// internal/callgrind; Node: the addon scripts/callgrind-node.c). A dump holds the instructions of
// its loop only, and (Ir(n2) - Ir(n1)) / (n2 - n1) is one warm request: what the two loops share
// (entering and leaving the loop) cancels. wazero's dumps count every thread (one P, no
// collector); V8's count the main thread only (--collect-atstart=no --separate-threads=yes, the
// addon collects on its own thread) of a node that runs V8's compiler and collector on that thread
// (--single-threaded). valgrind instruments only the measured part (--instrument measured, the
// default): it starts with --instr-atstart=no, and the process turns instrumentation on for a
// case's measured loops only (V8: its stability loops, n1 and n2, through the addon; wazero: n1
// and n2, internal/callgrind), so that compiling the module, configuring and the first warm-up
// requests run at valgrind's bare speed; --instrument all instruments the whole process (the
// method before, hours for the whole table; the figures are the same, docs/performance.md).
// --runs N runs each engine's process N times (side by side) and prints the median, and each
// case's spread over the runs. --jobs N splits each run's cases, ordered by module, into N
// processes side by side (each case still runs in one process, after the cases before it in its
// part; a V8 process compiles each module it loads once, lazily).
// Instruction counts do not depend on the machine's load; CPU time is `make bench-lifecycle`.
const fs = require('fs');
const path = require('path');
const { spawn } = require('child_process');

const root = path.resolve(__dirname, '..');
const build = path.join(root, 'build');
let out = path.join(build, 'instr'); // --out DIR

function parseArgs(argv) {
  const o = { against: '', n1: 500, n2: 2500, warm: WARM, runs: 1, jobs: 1, only: '', engines: 'wazero,v8', instrument: 'measured', out };
  const strings = ['against', 'only', 'engines', 'instrument', 'out'];
  for (let i = 0; i < argv.length; i += 2) {
    const k = argv[i].replace(/^--/, '');
    if (!(k in o) || argv[i + 1] === undefined) {
      throw new Error(`usage: bench-instructions.js [--against OTHER.wasm] [--n1 N] [--n2 N] [--warm N] [--runs N] [--jobs N] [--only CASE,CASE] [--engines wazero,v8] [--instrument measured|all] [--out DIR] (bad ${argv[i]})`);
    }
    o[k] = strings.includes(k) ? argv[i + 1] : Number(argv[i + 1]);
  }
  if (!(o.n2 > o.n1 && o.n1 > 0)) throw new Error('need 0 < n1 < n2');
  if (!(o.runs >= 1)) throw new Error('need runs >= 1');
  if (!(o.jobs >= 1)) throw new Error('need jobs >= 1');
  if (!['measured', 'all'].includes(o.instrument)) throw new Error(`instrument: measured or all, not ${o.instrument}`);
  o.only = o.only ? o.only.split(',') : [];
  o.engines = o.engines.split(',');
  if (!o.engines.length || o.engines.some((e) => !['wazero', 'v8'].includes(e))) throw new Error(`engines: wazero and/or v8, not ${o.engines}`);
  return o;
}

// WARM is the default warm-up: requests per case before the measured loops. V8 optimises the JS
// host's functions on the main thread as they get hot, so on V8 the warm-up goes on by loops of
// n2 - n1 requests until two in a row cost the same within STABLE (e2e/v8host/instr.js), up to
// MAXWARM requests (docs/performance.md, "Instruction counts").
const WARM = 2000;
const STABLE = 0.005;
const MAXWARM = 30000;

const ok = { headers: [[':status', '200'], ['content-type', 'text/plain']], body: 'ok' };
const big = '1000000000';
const rate = (extra = {}) => Object.assign({ name: 'per-ip', key: ['client_ip'], limits: [{ rate: `${big}/s` }] }, extra);
const cfg = (rules, extra = {}) => JSON.stringify(Object.assign({ rules }, extra));

// The lifecycle table's cases (e2e/lifecycle_bench_test.go's, the same configurations).
const lifecycle = [
  { name: 'floor', title: 'pass-through (floor)', module: 'passthrough', config: '{}' },
  // The pass-through plus the allowed request's host calls (cmd/hostfloor), with and without the
  // quota headers: what the filter's six (four) host calls cost, no decision.
  { name: 'hostfloor', title: 'host-call floor (the allowed request\'s host calls)', module: 'hostfloor', config: '{}' },
  { name: 'hostfloornq', title: 'host-call floor, no quota headers', module: 'hostfloor', config: '{"quota_headers":false}' },
  { name: 'allowed', title: 'allowed, per-IP rule, quota headers', config: cfg([rate()]) },
  { name: 'noquota', title: 'allowed, no quota headers', config: cfg([rate()], { response: { quota_headers_on_allowed: false } }) },
  { name: 'denied', title: 'denied (429)', config: cfg([rate({ limits: [{ rate: '1/h' }] })]) },
  { name: 'countonpass', title: 'count_on, answer not counted', config: cfg([rate({ count_on: { status: ['401'], penalty: '1m' } })]) },
  { name: 'counted401', title: 'count_on, 401 counted', config: cfg([rate({ count_on: { status: ['401'], penalty: '1m' } })]),
    response: { headers: [[':status', '401'], ['content-type', 'text/plain']], body: 'ok' } },
  { name: 'settleheader', title: 'settled from a response header', config: cfg([rate({ cost: { default: 1, max: 100, settle: { response_header: 'x-cost' } } })]),
    response: { headers: [[':status', '200'], ['content-type', 'text/plain'], ['x-cost', '3']], body: 'ok' } },
];

// Scaling: n rules of which only the last matches the request (GET bench.example/api/items); the
// others miss on their path prefix, or (hosts) on their host with the method matching. Then one
// rule with 1, 4 or 8 limits, all allowing.
const miss = {
  path: (i) => ({ path: { prefix: `/other${i}/` } }),
  hosts: (i) => ({ hosts: [`other${i}.example`], methods: ['GET'] }),
};
function rules(n, how) {
  const rs = [];
  for (let i = 1; i < n; i++) rs.push(rate({ name: `r${i}`, match: miss[how](i) }));
  rs.push(rate({ name: 'last', match: { path: { prefix: '/api/' } } }));
  return cfg(rs);
}
const windows = ['s', 'm', 'h', 'd'];
const limits = (n) => cfg([rate({ limits: Array.from({ length: n }, (_, i) => ({ rate: `${Number(big) + i}/${windows[i % 4]}` })) })]);
const scaling = [
  ...[1, 10, 50].map((n) => ({ name: `rules${n}`, title: `${n} rule${n > 1 ? 's' : ''}, last matches (path prefixes)`, config: rules(n, 'path'), table: 'rules', base: 'rules1' })),
  ...[10, 50].map((n) => ({ name: `hosts${n}`, title: `${n} rules, last matches (hosts, method matching)`, config: rules(n, 'hosts'), table: 'rules', base: 'rules1' })),
  ...[1, 4, 8].map((n) => ({ name: `limits${n}`, title: `1 rule, ${n} limit${n > 1 ? 's' : ''}`, config: limits(n), table: 'limits', base: 'limits1' })),
];

function caseFile(o) {
  const mods = [['', path.join(build, 'meshlimit.wasm')]];
  if (o.against) mods.unshift(['before/', path.resolve(o.against)]);
  const cases = [];
  for (const c of [...lifecycle, ...scaling]) {
    if (o.only.length && !o.only.includes(c.name)) continue;
    if (c.module) { // a floor module: measured once, not before and after
      cases.push({ name: c.name, module: path.join(build, `${c.module}.wasm`), config: c.config, response: c.response || ok });
      continue;
    }
    for (const [prefix, file] of mods) cases.push({ name: prefix + c.name, module: file, config: c.config, response: c.response || ok });
  }
  return {
    request: { headers: [[':method', 'GET'], [':path', '/api/items?page=2'], [':authority', 'bench.example'], [':scheme', 'http'], ['user-agent', 'bench']], source: '203.0.113.77:40000' },
    warm: o.warm, n1: o.n1, n2: o.n2, stable: STABLE, maxWarm: Math.max(MAXWARM, o.warm), instrument: o.instrument, cases,
  };
}

// native runs cmd without valgrind (a check that every case loads and runs, and for wazero the
// compilation into ENVOYHOST_CACHE_DIR, which the run under valgrind then reads instead of compiling).
function native(engine, cmd, args, cwd, env) {
  const r = require('child_process').spawnSync(cmd, args, { cwd, env: Object.assign({}, process.env, env), encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`${engine}: ${cmd} ${args.join(' ')} exited ${r.status}:\n${r.stdout}\n${r.stderr}`);
}

// run runs cmd under callgrind with its dumps in out/<engine>.out.K (with --separate-threads=yes,
// out/<engine>.out.K-TT per thread) and resolves to its stdout.
function run(engine, valgrindFlags, cmd, args, cwd, env) {
  for (const f of fs.readdirSync(out)) if (f.startsWith(`${engine}.out`)) fs.unlinkSync(path.join(out, f));
  const argv = ['--tool=callgrind', ...valgrindFlags, `--callgrind-out-file=${path.join(out, engine + '.out')}`, cmd, ...args];
  return new Promise((resolve, reject) => {
    const p = spawn('valgrind', argv, { cwd, env: Object.assign({}, process.env, env), stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    p.stdout.on('data', (d) => (stdout += d));
    p.stderr.on('data', (d) => (stderr += d));
    p.on('close', (code) => {
      fs.writeFileSync(path.join(out, `${engine}.log`), stderr);
      if (code !== 0) reject(new Error(`${engine}: valgrind ${argv.join(' ')} exited ${code}:\n${stdout}\n${stderr.slice(-3000)}`));
      else resolve(stdout);
    });
  });
}

// perRequest reads the dumps in the order of the "instr CASE N STATUS" lines (line k is dump k+1):
// per case, the warm-up loops, then n1 and n2; it returns case → {ir, status, warm}, warm the
// warm-up requests the case ran.
function perRequest(engine, stdout, spec, thread) {
  const lines = stdout.split('\n').filter((l) => l.startsWith('instr ')).map((l) => l.split(' '));
  const dump = (k) => {
    const m = /^summary: (\d+)$/m.exec(fs.readFileSync(path.join(out, `${engine}.out.${k}${thread}`), 'utf8'));
    if (!m) throw new Error(`${engine}: no summary in dump ${k}`);
    return Number(m[1]);
  };
  const res = {};
  for (const c of spec.cases) {
    const ks = lines.map((l, k) => (l[1] === c.name ? k : -1)).filter((k) => k >= 0);
    const [k1, k2] = ks.slice(-2);
    if (ks.length < 3 || Number(lines[k1][2]) !== spec.n1 || Number(lines[k2][2]) !== spec.n2) {
      throw new Error(`${engine}: case ${c.name} has no warm-up, n1 and n2 loops:\n${stdout}`);
    }
    const warm = ks.slice(0, -2).reduce((sum, k) => sum + Number(lines[k][2]), 0);
    res[c.name] = { ir: (dump(k2 + 1) - dump(k1 + 1)) / (spec.n2 - spec.n1), status: Number(lines[k2][3]), warm };
  }
  return res;
}

const k = (v) => (v === undefined ? '-' : `${(v / 1000).toFixed(1)}k`);
const x = (v, base) => (v === undefined || !base ? '-' : `${(v / base).toFixed(2)}×`);

// table prints one markdown table: per row, per engine, per module (before, after), the count and
// its ratio to the row's base case; only the engines and cases measured (--engines, --only).
function table(first, rows, res, o) {
  const engines = ['wazero', 'V8'].filter((e) => Object.keys(res[e]).length);
  const measured = (c) => engines.some((e) => Object.keys(res[e]).some((n) => n === c.name || n.endsWith('/' + c.name)));
  if (!rows.cases.some(measured)) return;
  const mods = o.against ? [['before/', 'before'], ['', 'after']] : [['', '']];
  const head = [first];
  for (const e of engines) for (const [, label] of mods) head.push(`${e} instr/req${label ? ` (${label})` : ''}`, `× ${rows.baseName}`);
  const lines = [`| ${head.join(' | ')} |`, `|${head.map(() => '---').join('|')}|`];
  for (const c of rows.cases.filter(measured)) {
    const cells = [c.title + (c.status && !c.title.includes(String(c.status)) ? ` (${c.status})` : '')];
    for (const e of engines) {
      for (const [prefix] of mods) {
        const name = c.module ? c.name : prefix + c.name;
        const base = rows.base.module ? rows.base.name : prefix + rows.base.name;
        const v = res[e][name] && res[e][name].ir;
        cells.push(k(v), c === rows.base ? '-' : x(v, res[e][base] && res[e][base].ir));
      }
    }
    lines.push(`| ${cells.join(' | ')} |`);
  }
  console.log(lines.join('\n') + '\n');
}

// engineCmds are the two processes: [valgrind flags, command, args, cwd, env, thread suffix of the
// dumps read]; a V8 process writes its dumps to out/<tag>.out.K-TT.
function engineCmds(cases, tag, instrument) {
  // GOGC=off: the Go collector of the test host (not Envoy's) stays out of the counts; no
  // asynchronous preemption signals (callgrind asserts on them); one P, fewer threads.
  const wazero = [['--smc-check=all-non-file', `--instr-atstart=${instrument === 'all' ? 'yes' : 'no'}`], path.join(build, 'e2e.test'),
    ['-test.run', '^$', '-test.bench', '^BenchmarkInstructionsWazero$', '-test.benchtime', '1x', '-instr.cases', cases],
    path.join(root, 'e2e'), { GOGC: 'off', GODEBUG: 'asyncpreemptoff=1', GOMAXPROCS: '1', ENVOYHOST_CACHE_DIR: path.join(build, 'wazero-cache') }, ''];
  // Envoy's V8 flags, then V8's compiler and collector on the main thread (instr.js). V8
  // patches the code it generated, in anonymous mappings: --smc-check=all-non-file checks those
  // (all would check node's own code too, for nothing). Only the main thread collects, in its own
  // dump; with --instrument measured, valgrind instruments only what instr.js asks it to.
  const v8 = [['--smc-check=all-non-file', '--collect-atstart=no', '--separate-threads=yes', `--instr-atstart=${instrument === 'all' ? 'yes' : 'no'}`], 'node',
    ['--no-liftoff', '--wasm-max-mem-pages=16384', '--single-threaded', path.join(root, 'e2e', 'v8host', 'main.js'), 'instr', cases, path.join(build, 'callgrind.node'), path.join(out, `${tag}.out`)],
    root, {}, '-01'];
  return { wazero, v8 };
}

// parts splits spec's cases, ordered by module, into n case files of consecutive cases in out
// (cases-J.json) and returns [file, spec] per part.
function parts(spec, n) {
  const order = [...new Set(spec.cases.map((c) => c.module))];
  const cases = [...spec.cases].sort((a, b) => order.indexOf(a.module) - order.indexOf(b.module));
  const size = Math.ceil(cases.length / n);
  const res = [];
  for (let j = 0; j * size < cases.length; j++) {
    const part = Object.assign({}, spec, { cases: cases.slice(j * size, (j + 1) * size) });
    const file = path.join(out, `cases-${j}.json`);
    fs.writeFileSync(file, JSON.stringify(part, null, 1));
    res.push([file, part]);
  }
  return res;
}

// measure runs one engine's process runs times under callgrind, side by side, each split into
// jobs processes (parts), and returns, per case, the median per-request count, the spread over the
// runs ((max - min) / median) and the last status.
async function measure(engine, cases, spec, runs, jobs) {
  const [, bin, args, cwd, env] = engineCmds(cases, engine, spec.instrument)[engine];
  native(engine, bin, args, cwd, env);
  const split = parts(spec, jobs);
  const one = async (r) => {
    const figures = await Promise.all(split.map(async ([file, part], j) => {
      const tag = `${engine}${r}${jobs > 1 ? `j${j}` : ''}`;
      const [vgFlags, , argv, , , thread] = engineCmds(file, tag, spec.instrument)[engine];
      return perRequest(tag, await run(tag, vgFlags, bin, argv, cwd, env), part, thread);
    }));
    return Object.assign({}, ...figures);
  };
  const all = await Promise.all(Array.from({ length: runs }, (_, r) => one(r)));
  const res = {};
  for (const name of Object.keys(all[0])) {
    const irs = all.map((a) => a[name].ir).sort((a, b) => a - b);
    const med = irs[Math.floor(irs.length / 2)];
    res[name] = { ir: med, irs: all.map((a) => a[name].ir), spread: (irs[irs.length - 1] - irs[0]) / med, status: all[0][name].status, warm: all.map((a) => a[name].warm) };
  }
  return res;
}

// spreadTable prints, per case and engine, the runs' figures and their spread.
function spreadTable(res, o) {
  const engines = Object.keys(res);
  const head = ['case', ...engines.flatMap((e) => [`${e} runs`, `${e} spread`, `${e} warm-up`])];
  const lines = [`| ${head.join(' | ')} |`, `|${head.map(() => '---').join('|')}|`];
  for (const name of Object.keys(res[engines[0]])) {
    const cells = [name];
    for (const e of engines) {
      const r = res[e][name];
      cells.push(r ? r.irs.map(k).join(', ') : '-', r ? `${(100 * r.spread).toFixed(2)}%` : '-', r ? r.warm.join(', ') : '-');
    }
    lines.push(`| ${cells.join(' | ')} |`);
  }
  console.log(`Repeatability: ${o.runs} processes per engine, instructions per request of each, spread = (max - min) / median:\n`);
  console.log(lines.join('\n') + '\n');
}

async function main() {
  const o = parseArgs(process.argv.slice(2));
  out = path.resolve(o.out);
  fs.mkdirSync(out, { recursive: true });
  const spec = caseFile(o);
  const cases = path.join(out, 'cases.json');
  fs.writeFileSync(cases, JSON.stringify(spec, null, 1));
  const names = { wazero: 'wazero', v8: 'V8' };
  const figures = await Promise.all(o.engines.map((e) => measure(e, cases, spec, o.runs, o.jobs)));
  const res = { wazero: {}, V8: {} };
  o.engines.forEach((e, i) => (res[names[e]] = figures[i]));
  fs.writeFileSync(path.join(out, 'results.json'), JSON.stringify({ n1: o.n1, n2: o.n2, warm: o.warm, runs: o.runs, jobs: o.jobs, against: o.against, instrument: o.instrument, res }, null, 1));
  for (const c of [...lifecycle, ...scaling]) {
    const s = (res.wazero[c.name] || res.V8[c.name] || {}).status;
    if (s) c.status = s;
  }
  const what = o.against ? `before = ${o.against}, after = build/meshlimit.wasm` : 'build/meshlimit.wasm';
  const med = o.runs > 1 ? `, median of ${o.runs} processes` : '';
  const warmest = Math.max(0, ...Object.values(res.V8).flatMap((r) => r.warm));
  const v8warm = o.engines.includes('v8') ? `; on V8 until two loops of ${o.n2 - o.n1} agree within ${100 * STABLE}%, at most ${warmest} here` : '';
  console.log(`Instructions per warm request (callgrind, (Ir(${o.n2}) - Ir(${o.n1})) / ${o.n2 - o.n1}, after ${o.warm} warm-up requests${v8warm}${med}; ${what}):\n`);
  table('case', { cases: lifecycle, base: lifecycle[0], baseName: 'floor' }, res, o);
  for (const t of ['rules', 'limits']) {
    const rows = scaling.filter((c) => c.table === t);
    table(t === 'rules' ? 'rules' : 'limits', { cases: rows, base: rows[0], baseName: rows[0].name.replace(/(\d+)$/, ' $1') }, res, o);
  }
  if (o.runs > 1) {
    const shown = {};
    o.engines.forEach((e) => (shown[names[e]] = res[names[e]]));
    spreadTable(shown, o);
  }
  console.log('CPU time beside it: `make bench-lifecycle` (alternated, both engines).');
}

module.exports = { caseFile, parseArgs }; // scripts/attribute-instructions.js runs the same cases

if (require.main === module) {
  main().catch((err) => {
    console.error(`bench-instructions: ${err.message}`);
    process.exit(1);
  });
}
