'use strict';
// attribute-instructions: where a warm request's instructions go on wazero, by guest package and
// function and by host function, from two callgrind dumps of one case (n1 and n2 requests) and
// the perf map wazero wrote for its compiled code (`make attribute-instructions`).
//
//   node scripts/attribute-instructions.js --run CASE [--top K]
//   node scripts/attribute-instructions.js PERFMAP DUMP1 N1 DUMP2 N2 [--top K] [--floor DUMP1 N1 DUMP2 N2]
//
// --run CASE runs the pass-through floor and CASE (a case name of scripts/bench-instructions.js)
// under callgrind with build/e2e-perfmap.test (the e2e test binary built with -tags perfmap, see
// `make attribute-instructions`), then prints the tables for those dumps; the second form reads
// dumps already made.
//
// The dumps come from valgrind --tool=callgrind --dump-instr=yes around the measured loops of the
// e2e binary's BenchmarkInstructionsWazero, built with -tags perfmap (wazero then writes
// /tmp/perf-PID.map: the address range of each compiled wasm function, by its name). Each
// instruction's self cost goes to the wasm function whose range holds its address, else to the
// native function callgrind names (the host: the Go test host, wazero's runtime). Per request is
// (cost in dump2 - cost in dump1) / (n2 - n1), as scripts/bench-instructions.js counts.
const fs = require('fs');
const path = require('path');
const { spawnSync } = require('child_process');

// perfMap reads "ADDR SIZE NAME" lines into sorted ranges (a later entry for the same address
// wins: wazero appends a module's functions each time it compiles one).
function perfMap(file) {
  const byStart = new Map();
  for (const line of fs.readFileSync(file, 'utf8').split('\n')) {
    const m = /^([0-9a-f]+) ([0-9a-f]+) (.*)$/.exec(line);
    if (!m || parseInt(m[2], 16) === 0) continue;
    const name = m[3].replace(/^\[\d+\/\d+\]\.?/, '').replace(/:::::L\d+$/, ''); // [index/count].name:::::Lblock
    byStart.set(parseInt(m[1], 16), { start: parseInt(m[1], 16), end: parseInt(m[1], 16) + parseInt(m[2], 16), name });
  }
  return [...byStart.values()].sort((a, b) => a.start - b.start);
}

function lookup(ranges, addr) {
  let lo = 0;
  let hi = ranges.length - 1;
  while (lo <= hi) {
    const mid = (lo + hi) >> 1;
    const r = ranges[mid];
    if (addr < r.start) hi = mid - 1;
    else if (addr >= r.end) lo = mid + 1;
    else return r;
  }
  return null;
}

// selfCosts reads a callgrind dump (positions: instr line, events: Ir) into Map name → self Ir:
// the wasm function of the instruction's address, else "host " + callgrind's function name. The
// cost line after a calls= line is the call's inclusive cost: skipped.
function selfCosts(file, ranges) {
  const out = new Map();
  const names = new Map();
  let fn = '';
  let addr = 0;
  let skip = false;
  const add = (k, v) => out.set(k, (out.get(k) || 0) + v);
  for (const line of fs.readFileSync(file, 'utf8').split('\n')) {
    if (line.startsWith('fn=')) {
      const m = /^fn=\((\d+)\)(?: (.*))?$/.exec(line);
      if (m[2] !== undefined) names.set(m[1], m[2]);
      fn = names.get(m[1]);
      continue;
    }
    if (line.startsWith('cfn=')) { // a called function's name, defined on first use
      const m = /^cfn=\((\d+)\) (.*)$/.exec(line);
      if (m) names.set(m[1], m[2]);
      continue;
    }
    if (line.startsWith('calls=')) {
      skip = true;
      continue;
    }
    const m = /^(0x[0-9a-f]+|[+-]\d+|\*)\s+\S+\s+(\d+)$/.exec(line);
    if (!m) continue;
    if (m[1].startsWith('0x')) addr = parseInt(m[1], 16);
    else if (m[1] !== '*') addr += Number(m[1]);
    if (skip) {
      skip = false;
      continue;
    }
    const r = lookup(ranges, addr);
    add(r ? r.name : `host ${fn}`, Number(m[2]));
  }
  return out;
}

function perRequest(ranges, d1, n1, d2, n2) {
  const a = selfCosts(d1, ranges);
  const b = selfCosts(d2, ranges);
  const res = new Map();
  for (const k of new Set([...a.keys(), ...b.keys()])) res.set(k, ((b.get(k) || 0) - (a.get(k) || 0)) / (n2 - n1));
  return res;
}

// group names a function's part of the table: the guest's Go package (wasm names are Go's
// symbols), the guest's runtime and wazero's trampolines, or the host.
function group(name) {
  if (name.startsWith('host ')) {
    const s = name.slice(5);
    if (s.includes('internal/envoyhost')) return 'host: internal/envoyhost (the test host)';
    if (s.includes('tetratelabs/wazero')) return 'host: wazero (calls into and out of the guest)';
    if (s.startsWith('runtime.') || s.startsWith('0x') || s === '???') return 'host: Go runtime and unnamed code';
    return 'host: other';
  }
  // wazero's names are Go's symbols with '/' and '.' in the package path as '_':
  // github.com_meshlimit_meshlimit_filter.__pluginContext_.decide
  let pkg = name.startsWith('github.com_') ? 'github.com_' + name.slice(11).split('.')[0] : name.split('.')[0];
  pkg = pkg.replace('github.com_meshlimit_meshlimit_', '').replace('github.com_tetratelabs_proxy_wasm_go_sdk_', 'sdk/');
  if (/^(runtime|internal_|sync|memeqbody|memmove|memclr)/.test(pkg)) pkg = 'Go runtime (guest)';
  if (/trampoline|preamble/.test(name)) pkg = 'wazero trampolines';
  return `guest: ${pkg}`;
}

// run runs the floor and name under callgrind and returns the arguments of the second form.
function run(name) {
  const root = path.resolve(__dirname, '..');
  const dir = path.join(root, 'build', 'attr');
  fs.mkdirSync(dir, { recursive: true });
  for (const f of fs.readdirSync(dir)) fs.unlinkSync(path.join(dir, f));
  const { caseFile, parseArgs } = require('./bench-instructions.js');
  const spec = caseFile(Object.assign(parseArgs([]), { only: ['floor', name] }));
  if (spec.cases.length !== 2) throw new Error(`no case ${name} in scripts/bench-instructions.js`);
  const cases = path.join(dir, 'cases.json');
  fs.writeFileSync(cases, JSON.stringify(spec));
  // No ENVOYHOST_CACHE_DIR: wazero compiles the module in the process, and writes its perf map.
  const r = spawnSync('valgrind', ['--tool=callgrind', '--smc-check=all-non-file', '--instr-atstart=no', '--dump-instr=yes',
    `--callgrind-out-file=${path.join(dir, 'cg.out')}`, path.join(root, 'build', 'e2e-perfmap.test'), '-test.run', '^$',
    '-test.bench', '^BenchmarkInstructionsWazero$', '-test.benchtime', '1x', '-instr.cases', cases],
  { cwd: path.join(root, 'e2e'), env: Object.assign({}, process.env, { GOGC: 'off', GODEBUG: 'asyncpreemptoff=1', GOMAXPROCS: '1' }), encoding: 'utf8', maxBuffer: 1 << 26 });
  if (r.status !== 0) throw new Error(`valgrind exited ${r.status}:\n${r.stdout}\n${(r.stderr || '').slice(-3000)}`);
  const perf = `/tmp/perf-${r.pid}.map`;
  fs.renameSync(perf, path.join(dir, 'perf.map'));
  // "instr CASE N STATUS" lines, in the order of the dumps (line k is dump k+1).
  const dumps = {};
  r.stdout.split('\n').filter((l) => l.startsWith('instr ')).forEach((l, k) => {
    const [, c, n] = l.split(' ');
    dumps[`${c} ${n}`] = path.join(dir, `cg.out.${k + 1}`);
  });
  const pick = (c) => [dumps[`${c} ${spec.n1}`], spec.n1, dumps[`${c} ${spec.n2}`], spec.n2];
  return [path.join(dir, 'perf.map'), ...pick(name), '--floor', ...pick('floor')].map(String);
}

function main(argv) {
  const o = { top: 40 };
  const pos = [];
  const at = argv.indexOf('--run');
  if (at >= 0) argv = [...run(argv[at + 1]), ...argv.slice(0, at), ...argv.slice(at + 2)];
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === '--top') o.top = Number(argv[++i]);
    else if (argv[i] === '--floor') o.floor = argv.slice(i + 1, i + 5), (i += 4);
    else pos.push(argv[i]);
  }
  if (pos.length !== 5) throw new Error('usage: attribute-instructions.js PERFMAP DUMP1 N1 DUMP2 N2 [--top K] [--floor DUMP1 N1 DUMP2 N2]');
  const ranges = perfMap(pos[0]);
  const res = perRequest(ranges, pos[1], Number(pos[2]), pos[3], Number(pos[4]));
  const floor = o.floor ? perRequest(ranges, o.floor[0], Number(o.floor[1]), o.floor[2], Number(o.floor[3])) : new Map();
  const total = (m) => [...m.values()].reduce((s, v) => s + v, 0);
  const groups = (m) => {
    const g = new Map();
    for (const [k, v] of m) g.set(group(k), (g.get(group(k)) || 0) + v);
    return g;
  };
  const gr = groups(res);
  const gf = groups(floor);
  const k = (v) => (v / 1000).toFixed(2) + 'k';
  console.log(`| part | instructions/request | floor | beyond the floor |\n|---|---|---|---|`);
  for (const name of [...new Set([...gr.keys(), ...gf.keys()])].sort((a, b) => (gr.get(b) || 0) - (gr.get(a) || 0))) {
    const v = gr.get(name) || 0;
    const f = gf.get(name) || 0;
    if (Math.abs(v) < 50 && Math.abs(f) < 50) continue;
    console.log(`| ${name} | ${k(v)} | ${k(f)} | ${k(v - f)} |`);
  }
  console.log(`| total | ${k(total(res))} | ${k(total(floor))} | ${k(total(res) - total(floor))} |\n`);
  console.log(`| function (self) | instructions/request | floor |\n|---|---|---|`);
  for (const [name, v] of [...res].sort((a, b) => b[1] - a[1]).slice(0, o.top)) {
    console.log(`| ${name.replace(/\|/g, '\\|')} | ${k(v)} | ${k(floor.get(name) || 0)} |`);
  }
}

main(process.argv.slice(2));
