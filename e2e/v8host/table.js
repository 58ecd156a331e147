'use strict';
// Prints the lifecycle benchmark of both engines side by side, from `go test -bench` output that holds
// BenchmarkLifecycleAlternated/wazero and /v8 lines (medians over the -count runs).
//
//   node e2e/v8host/table.js build/bench.txt
const fs = require('fs');

const runs = {}; // engine → unit → [values]
for (const line of fs.readFileSync(process.argv[2], 'utf8').split('\n')) {
  const m = /^BenchmarkLifecycleAlternated\/(\w+)(?:-\d+)?\s+\d+\s+(.*)$/.exec(line);
  if (!m) continue;
  const fields = m[2].trim().split(/\s+/);
  const byUnit = (runs[m[1]] = runs[m[1]] || {});
  for (let i = 0; i + 1 < fields.length; i += 2) (byUnit[fields[i + 1]] = byUnit[fields[i + 1]] || []).push(Number(fields[i]));
}
const median = (vs) => (vs ? vs.slice().sort((a, b) => a - b)[vs.length >> 1] : undefined);
const engines = ['wazero', 'v8'].filter((e) => runs[e]);
if (!engines.length) {
  console.error('no BenchmarkLifecycleAlternated lines in ' + process.argv[2]);
  process.exit(1);
}
const fmt = (v, digits) => (v === undefined ? '-' : v.toFixed(digits));
const header = ['case'];
for (const e of engines) header.push(`${e} CPU µs/req`, `${e} overhead ×floor`);
header.push('host calls/req', 'guest allocs/req', 'guest calls/req (v8)');
const rows = [header];
const names = {
  floor: 'pass-through (floor)', allowed: 'allowed, quota headers', noquota: 'allowed, no quota headers', denied: 'denied',
  countonpass: 'count_on, answer not counted', counted401: 'count_on, 401 counted', settleheader: 'settled from a response header',
};
for (const c of Object.keys(names).filter((k) => engines.some((e) => runs[e][`${k}-cpu-ns/req`]))) {
  const row = [names[c]];
  for (const e of engines) {
    row.push(fmt(median(runs[e][`${c}-cpu-ns/req`]) / 1000, 2), c === 'floor' ? '-' : fmt(median(runs[e][`${c}-overhead-x`]), 2));
  }
  const calls = (unit) => engines.map((e) => fmt(median(runs[e][`${c}-${unit}`]), 1)).join(' / ');
  row.push(calls('hostcalls/req'), calls('guestallocs/req'), fmt(median((runs.v8 || {})[`${c}-guestcalls/req`]), 1));
  rows.push(row);
}
const widths = header.map((_, i) => Math.max(...rows.map((r) => String(r[i]).length)));
for (const r of rows) console.log(r.map((v, i) => String(v).padEnd(widths[i])).join('  '));
console.log(`(overhead = (case - floor) / floor, CPU time; calls as ${engines.join(' / ')})`);
