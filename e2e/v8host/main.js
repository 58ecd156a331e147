'use strict';
// The V8 host's command line. Run it with Envoy's V8 flags:
//
//   node --no-liftoff --wasm-max-mem-pages=16384 e2e/v8host/main.js scenarios [--module NAME=PATH]... e2e/scenarios/*.json
//     (NAME is a scenario's "module"; meshlimit defaults to build/meshlimit.wasm)
//   node --no-liftoff --wasm-max-mem-pages=16384 e2e/v8host/main.js bench build/passthrough.wasm build/meshlimit.wasm [rounds] [batch]
//   node --no-liftoff --wasm-max-mem-pages=16384 e2e/v8host/main.js chunks build/passthrough.wasm build/meshlimit.wasm [rounds] [batch]
//   node --no-liftoff --wasm-max-mem-pages=16384 e2e/v8host/main.js coldstart build/meshlimit.wasm [workers]
//   node --no-liftoff --wasm-max-mem-pages=16384 e2e/v8host/main.js coldruns RUNS build/passthrough.wasm build/meshlimit.wasm
//   node --no-liftoff --wasm-max-mem-pages=16384 e2e/v8host/main.js coldbytes build/passthrough.wasm build/meshlimit.wasm [...]
//   node --no-liftoff --wasm-max-mem-pages=16384 --single-threaded e2e/v8host/main.js instr CASES.json build/callgrind.node [DUMPS]   (scripts/bench-instructions.js)
//   node --no-liftoff --wasm-max-mem-pages=16384 e2e/v8host/main.js profile build/passthrough.wasm build/meshlimit.wasm CASE [n] [top]
//
// scenarios and bench print JSON on stdout; coldstart, coldruns (medians of fresh processes), coldbytes (the function bodies
// TurboFan compiles in each phase of the cold start, by package) and profile (self time of the top functions while one case
// runs warm) print tables.
const { run } = require('./scenario');
const { lifecycle, coldStart, coldRuns, profile } = require('./bench');
const { chunks } = require('./chunks');
const { instr } = require('./instr');
const { coldBytes } = require('./coldbytes');

const envoyFlags = ['--no-liftoff', '--wasm-max-mem-pages=16384'];

// The cold start's configuration: one per-IP rule.
const coldConfig = '{"rules":[{"name":"per-ip","key":["client_ip"],"limits":[{"rate":"100/s"}]}]}';

function printColdStart(r) {
  console.log('  wall ms    cpu ms  phase');
  for (const m of r.marks) console.log(`${m.ms.toFixed(1).padStart(9)} ${m.cpu_ms.toFixed(1).padStart(9)}  ${m.phase}`);
  console.log(`${r.total_ms.toFixed(1).padStart(9)} ${r.total_cpu_ms.toFixed(1).padStart(9)}  total, bytes to second response (${r.failed} failed VMs)`);
}

function main(argv) {
  const missing = envoyFlags.filter((f) => !process.execArgv.includes(f));
  if (missing.length) {
    throw new Error(`run node with Envoy's V8 flags: node ${envoyFlags.join(' ')} ${process.argv[1]} ... (missing ${missing.join(' ')})`);
  }
  const [cmd, ...args] = argv;
  switch (cmd) {
    case 'scenarios': {
      const modules = { meshlimit: 'build/meshlimit.wasm' };
      while (args[0] === '--module') {
        const [name, file] = args[1].split('=');
        modules[name] = file;
        args.splice(0, 2);
      }
      process.stdout.write(JSON.stringify(run(modules, args)) + '\n');
      return;
    }
    case 'bench': {
      const figures = lifecycle({ passthrough: args[0], meshlimit: args[1] }, Number(args[2] || 20), Number(args[3] || 2000));
      process.stdout.write(JSON.stringify({ engine: 'v8', node: process.version, v8: process.versions.v8, cases: figures }) + '\n');
      return;
    }
    case 'chunks': { // e2e/messages_bench_test.go's BenchmarkStreamChunkOnV8
      const figures = chunks({ passthrough: args[0], meshlimit: args[1] }, Number(args[2] || 40), Number(args[3] || 256));
      process.stdout.write(JSON.stringify({ engine: 'v8', cases: figures }) + '\n');
      return;
    }
    case 'coldstart': {
      printColdStart(coldStart(args[0], coldConfig, Number(args[1] || 2)));
      return;
    }
    case 'coldstart-json': { // one run of coldstart for coldruns
      process.stdout.write(JSON.stringify(coldStart(args[0], coldConfig, Number(args[1] || 2))) + '\n');
      return;
    }
    case 'coldstart-stop': { // one run of coldstart that exits after a phase, for coldbytes
      coldStart(args[0], coldConfig, 2, args[1]);
      throw new Error(`no phase "${args[1]}"`);
    }
    case 'coldbytes': {
      for (const r of coldBytes(args, 6)) {
        console.log(`== ${r.module}: ${r.functions} functions, ${(r.bytes / 1024).toFixed(1)} KiB of bodies compiled by the second response`);
        console.log('  functions   KiB  phase: top packages (KiB)');
        for (const p of r.phases) {
          const pkgs = p.packages.map(([k, v]) => `${k} ${(v / 1024).toFixed(1)}`).join(', ');
          console.log(`${String(p.functions).padStart(11)} ${(p.bytes / 1024).toFixed(1).padStart(5)}  ${p.phase}: ${pkgs}`);
        }
      }
      return;
    }
    case 'coldruns': {
      for (const r of coldRuns(args.slice(1), Number(args[0]), 2)) {
        console.log(`== ${r.module} (${r.bytes} bytes), medians of ${args[0]} fresh processes, alternated`);
        printColdStart(r);
      }
      return;
    }
    case 'instr': {
      process.stdout.write(instr(args[0], args[1], args[2] || '').join('\n') + '\n');
      return;
    }
    case 'profile': {
      const rows = profile({ passthrough: args[0], meshlimit: args[1] }, args[2], Number(args[3] || 200000), Number(args[4] || 25));
      for (const r of rows) console.log(`${r.pct.toFixed(1).padStart(5)}%  ${r.fn}`);
      return;
    }
  }
  throw new Error('usage: main.js scenarios|bench|chunks|coldstart|coldruns|coldbytes|instr|profile ...');
}

try {
  main(process.argv.slice(2));
} catch (err) {
  console.error(`v8host: ${err.message}`);
  process.exit(1);
}
