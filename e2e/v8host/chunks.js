'use strict';
// The stream chunk benchmark on V8 (e2e/messages_bench_test.go's BenchmarkStreamChunk on wazero):
// one chunk of N gRPC messages (16 payload bytes each) delivered to an open bidirectional stream,
// for the pass-through floor, meshlimit with a request rule and meshlimit with a message rule, in
// CPU time per chunk (process.cpuUsage over a batch of chunks on one stream), the cases alternated
// batch by batch in one warm process.
const fs = require('fs');
const { Plugin } = require('./plugin');
const { Stream, REQ } = require('./stream');
const { LogLevel } = require('./abi');

const ruleOf = (messages) => `{"rules":[{"name":"chat","key":[{"header":"x-user"}],"limits":[{"rate":"1000000000/s"}]${messages}}]}`;
const kinds = [
  { name: 'floor', module: 'passthrough', config: '{}' },
  { name: 'request-rule', module: 'meshlimit', config: ruleOf('') },
  { name: 'message-rule', module: 'meshlimit', config: ruleOf(',"messages":{"direction":"request"}') },
];
const sizes = [1, 16, 256];
const streamChunks = 256;

const reqHeaders = [[':method', 'POST'], [':path', '/chat.Chat/Talk'], [':authority', 'a.example'], [':scheme', 'http'],
  ['content-type', 'application/grpc'], ['te', 'trailers'], ['x-user', 'ann']];

function grpcChunk(n) {
  const one = '\x00\x00\x00\x00\x10' + 'm'.repeat(16);
  return one.repeat(n);
}

function cpuNs() {
  const u = process.cpuUsage();
  return (u.user + u.system) * 1000;
}

function openStream(vm) {
  const s = new Stream(vm, { source: '192.0.2.7:40000' });
  s.sendRequestHeaders(reqHeaders, false);
  s.sendResponseHeaders([[':status', '200'], ['content-type', 'application/grpc']], false);
  return s;
}

// chunks runs rounds batches of batch chunks (at most 256, one stream each, opened and closed
// untimed) per case and returns the median CPU ns per chunk.
function chunks(wasm, rounds, batch) {
  batch = Math.min(batch, streamChunks);
  const states = [];
  for (const n of sizes) {
    for (const k of kinds) {
      const bytes = fs.readFileSync(wasm[k.module]);
      const p = new Plugin({ vmId: k.module, rootId: k.module, pluginConfig: k.config, workers: 1, logLevel: LogLevel.info }).load(bytes);
      states.push({ name: `${k.name}/messages=${n}`, vm: p.vms[0], chunk: grpcChunk(n), perRound: [] });
    }
  }
  const batchOf = (st, timed) => {
    const s = openStream(st.vm);
    const c0 = cpuNs();
    for (let i = 0; i < batch; i++) s.sendBody(REQ, st.chunk, false);
    const cpu = cpuNs() - c0;
    s.close();
    if (timed) st.perRound.push(cpu / batch);
  };
  for (const st of states) for (let i = 0; i < 4; i++) batchOf(st, false); // warm up
  const counts = states.map((st) => [st.vm.hostCalls, st.vm.guestAllocs]);
  for (let r = 0; r < rounds; r++) for (const st of states) batchOf(st, true);
  return states.map((st, i) => {
    if (st.vm.failed) throw new Error(`${st.name}: ${st.vm.failed}`);
    const n = rounds * batch;
    return {
      name: st.name,
      cpu_ns: st.perRound.sort((a, b) => a - b)[st.perRound.length >> 1],
      hostcalls: (st.vm.hostCalls - counts[i][0]) / n, // the stream's headers and end included
      guestallocs: (st.vm.guestAllocs - counts[i][1]) / n,
    };
  });
}

module.exports = { chunks };
