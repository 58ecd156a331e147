'use strict';
// bench-instructions: instructions per request of the filter's request lifecycle on wazero and on
// V8, counted by valgrind --tool=callgrind, printed as markdown tables (`make bench-instructions`).
//
//   node scripts/bench-instructions.js [--against OTHER.wasm] [--n1 N] [--n2 N] [--warm N]
//
// It writes the cases to build/instr/cases.json (the same file drives both engines) and runs, side
// by side, the e2e test binary's BenchmarkInstructionsWazero and e2e/v8host/main.js instr under
// callgrind. Each engine's process loads every case, warms it up, then runs a loop of n1 and one of
// n2 requests, each between callgrind's ZERO_STATS and DUMP_STATS client requests (Go:
// internal/callgrind; Node: the addon scripts/callgrind-node.c). A dump holds the instructions of
// its loop only, on every thread, and (Ir(n2) - Ir(n1)) / (n2 - n1) is one warm request: what the
// two loops share (entering and leaving, a collection or a compilation that both see) cancels.
// Instruction counts do not depend on the machine's load; CPU time is `make bench-lifecycle`.
const fs = require('fs');
const path = require('path');
const { spawn } = require('child_process');

const root = path.resolve(__dirname, '..');
const build = path.join(root, 'build');
const out = path.join(build, 'instr');

function parseArgs(argv) {
  const o = { against: '', n1: 200, n2: 1200, warm: 1000 };
  for (let i = 0; i < argv.length; i += 2) {
    const k = argv[i].replace(/^--/, '');
    if (!(k in o) || argv[i + 1] === undefined) throw new Error(`usage: bench-instructions.js [--against OTHER.wasm] [--n1 N] [--n2 N] [--warm N] (bad ${argv[i]})`);
    o[k] = k === 'against' ? argv[i + 1] : Number(argv[i + 1]);
  }
  if (!(o.n2 > o.n1 && o.n1 > 0)) throw new Error('need 0 < n1 < n2');
  return o;
}

const ok = { headers: [[':status', '200'], ['content-type', 'text/plain']], body: 'ok' };
const big = '1000000000';
const rate = (extra = {}) => Object.assign({ name: 'per-ip', key: ['client_ip'], limits: [{ rate: `${big}/s` }] }, extra);
const cfg = (rules, extra = {}) => JSON.stringify(Object.assign({ rules }, extra));

// The lifecycle table's cases (e2e/lifecycle_bench_test.go's, the same configurations).
const lifecycle = [
  { name: 'floor', title: 'pass-through (floor)', module: 'passthrough', config: '{}' },
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
    if (c.module === 'passthrough') {
      cases.push({ name: c.name, module: path.join(build, 'passthrough.wasm'), config: c.config, response: c.response || ok });
      continue;
    }
    for (const [prefix, file] of mods) cases.push({ name: prefix + c.name, module: file, config: c.config, response: c.response || ok });
  }
  return {
    request: { headers: [[':method', 'GET'], [':path', '/api/items?page=2'], [':authority', 'bench.example'], [':scheme', 'http'], ['user-agent', 'bench']], source: '203.0.113.77:40000' },
    warm: o.warm, n1: o.n1, n2: o.n2, cases,
  };
}

// native runs cmd without valgrind (a check that every case loads and runs, and for wazero the
// compilation into ENVOYHOST_CACHE_DIR, which the run under valgrind then reads instead of compiling).
function native(engine, cmd, args, cwd, env) {
  const r = require('child_process').spawnSync(cmd, args, { cwd, env: Object.assign({}, process.env, env), encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`${engine}: ${cmd} ${args.join(' ')} exited ${r.status}:\n${r.stdout}\n${r.stderr}`);
}

// run runs cmd under callgrind with its dumps in out/<engine>.out.K and resolves to its stdout.
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

// perRequest reads the dumps in the order of the "instr CASE N STATUS" lines: per case, the warm-up,
// n1 and n2 loops; it returns case → {ir, status}.
function perRequest(engine, stdout, spec) {
  const lines = stdout.split('\n').filter((l) => l.startsWith('instr '));
  if (lines.length !== 3 * spec.cases.length) throw new Error(`${engine}: ${lines.length} loops for ${spec.cases.length} cases:\n${stdout}`);
  const dump = (k) => {
    const m = /^summary: (\d+)$/m.exec(fs.readFileSync(path.join(out, `${engine}.out.${k}`), 'utf8'));
    if (!m) throw new Error(`${engine}: no summary in dump ${k}`);
    return Number(m[1]);
  };
  const res = {};
  spec.cases.forEach((c, i) => {
    const ir1 = dump(3 * i + 2);
    const ir2 = dump(3 * i + 3);
    res[c.name] = { ir: (ir2 - ir1) / (spec.n2 - spec.n1), status: Number(lines[3 * i + 2].split(' ')[3]) };
  });
  return res;
}

const k = (v) => (v === undefined ? '-' : `${(v / 1000).toFixed(1)}k`);
const x = (v, base) => (v === undefined || !base ? '-' : `${(v / base).toFixed(2)}×`);

// table prints one markdown table: per row, per engine, per module (before, after), the count and
// its ratio to the row's base case.
function table(first, rows, res, o) {
  const engines = ['wazero', 'V8'];
  const mods = o.against ? [['before/', 'before'], ['', 'after']] : [['', '']];
  const head = [first];
  for (const e of engines) for (const [, label] of mods) head.push(`${e} instr/req${label ? ` (${label})` : ''}`, `× ${rows.baseName}`);
  const lines = [`| ${head.join(' | ')} |`, `|${head.map(() => '---').join('|')}|`];
  for (const c of rows.cases) {
    const cells = [c.title + (c.status && !c.title.includes(String(c.status)) ? ` (${c.status})` : '')];
    for (const e of engines) {
      for (const [prefix] of mods) {
        const name = c.module === 'passthrough' ? c.name : prefix + c.name;
        const base = rows.base.module === 'passthrough' ? rows.base.name : prefix + rows.base.name;
        const v = res[e][name] && res[e][name].ir;
        cells.push(k(v), c === rows.base ? '-' : x(v, res[e][base] && res[e][base].ir));
      }
    }
    lines.push(`| ${cells.join(' | ')} |`);
  }
  console.log(lines.join('\n') + '\n');
}

async function main() {
  const o = parseArgs(process.argv.slice(2));
  fs.mkdirSync(out, { recursive: true });
  const spec = caseFile(o);
  const cases = path.join(out, 'cases.json');
  fs.writeFileSync(cases, JSON.stringify(spec, null, 1));
  // GOGC=off: the Go collector of the test host (not Envoy's) stays out of the counts; no
  // asynchronous preemption signals (callgrind asserts on them); one P, fewer threads.
  const wzCmd = [path.join(build, 'e2e.test'), ['-test.run', '^$', '-test.bench', '^BenchmarkInstructionsWazero$', '-test.benchtime', '1x', '-instr.cases', cases],
    path.join(root, 'e2e'), { GOGC: 'off', GODEBUG: 'asyncpreemptoff=1', GOMAXPROCS: '1', ENVOYHOST_CACHE_DIR: path.join(build, 'wazero-cache') }];
  // Envoy's V8 flags.
  const v8Cmd = ['node', ['--no-liftoff', '--wasm-max-mem-pages=16384', path.join(root, 'e2e', 'v8host', 'main.js'), 'instr', cases, path.join(build, 'callgrind.node')], root, {}];
  native('wazero', ...wzCmd);
  native('v8', ...v8Cmd);
  // V8 patches the code it generated: --smc-check=all.
  const [wz, v8] = await Promise.all([run('wazero', ['--smc-check=all-non-file'], ...wzCmd), run('v8', ['--smc-check=all'], ...v8Cmd)]);
  const res = { wazero: perRequest('wazero', wz, spec), V8: perRequest('v8', v8, spec) };
  fs.writeFileSync(path.join(out, 'results.json'), JSON.stringify({ n1: o.n1, n2: o.n2, warm: o.warm, against: o.against, res }, null, 1));
  for (const c of [...lifecycle, ...scaling]) {
    const s = res.wazero[c.name] ? res.wazero[c.name].status : 0;
    if (s) c.status = s;
  }
  const what = o.against ? `before = ${o.against}, after = build/meshlimit.wasm` : 'build/meshlimit.wasm';
  console.log(`Instructions per warm request (callgrind, (Ir(${o.n2}) - Ir(${o.n1})) / ${o.n2 - o.n1}, after ${o.warm} warm-up requests; ${what}):\n`);
  table('case', { cases: lifecycle, base: lifecycle[0], baseName: 'floor' }, res, o);
  for (const t of ['rules', 'limits']) {
    const rows = scaling.filter((c) => c.table === t);
    table(t === 'rules' ? 'rules' : 'limits', { cases: rows, base: rows[0], baseName: rows[0].name.replace(/(\d+)$/, ' $1') }, res, o);
  }
  console.log('CPU time beside it: `make bench-lifecycle` (alternated, both engines).');
}

main().catch((err) => {
  console.error(`bench-instructions: ${err.message}`);
  process.exit(1);
});
