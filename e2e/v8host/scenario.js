'use strict';
// Runs the shared scenarios (e2e/scenarios/*.json) and reports what happened, step by step, in the
// form the Go test compares with the wazero host's run and with the scenarios' expectations. The
// format is described in e2e/scenarios/README.md.
const fs = require('fs');
const path = require('path');
const { Plugin, Process, Clock } = require('./plugin');
const { Stream, roundTrip, sendRequest, finishResponse, sendMessage, REQ, RESP } = require('./stream');
const { LogLevel } = require('./abi');

const epochNs = BigInt(Date.UTC(2026, 10, 29, 12, 0, 0)) * 1000000n; // 2026-11-29T12:00:00Z
const upstream = { headers: [[':status', '200'], ['content-type', 'text/plain']], body: 'ok' };

const bin = (s) => Buffer.from(s, 'utf8').toString('latin1');
const text = (s) => Buffer.from(s, 'latin1').toString('utf8');
const sorted = (h) => (h ? h.map(([k, v]) => [text(k), text(v)]).sort((a, b) => (a[0] + '\0' + a[1] < b[0] + '\0' + b[1] ? -1 : 1)) : null);

// request turns a scenario request into the host's form.
function request(r) {
  const h = [[':method', r.method || 'GET'], [':path', r.path || '/'], [':authority', r.authority || 'a.example'], [':scheme', 'http']];
  for (const [k, v] of r.headers || []) h.push([bin(k), bin(v)]);
  return { headers: h, info: { source: r.source || '192.0.2.1:40000', routeName: r.route || '' }, chunks: chunks(r), endStream: r.end_stream, trailers: trailers(r) };
}

// response turns a scenario response into the host's form; without one the upstream answers 200 ok.
function response(r) {
  if (!r) return upstream;
  const h = [[':status', String(r.status || 200)]];
  for (const [k, v] of r.headers || [['content-type', 'text/plain']]) h.push([bin(k), bin(v)]);
  return { headers: h, chunks: chunks(r), endStream: r.end_stream, trailers: trailers(r) };
}

// trailers are a scenario message's trailers in the host's form, null without any.
function trailers(m) {
  return m.trailers ? m.trailers.map(([k, v]) => [bin(k), bin(v)]) : null;
}

// chunks is the body of a scenario request or response as the list of chunks it arrives in: the
// given chunks, or body (or body_size bytes of 'x') cut into pieces of chunk_size bytes.
function chunks(m) {
  if (m.chunks) return m.chunks.map(bin);
  const body = m.body !== undefined ? bin(m.body) : 'x'.repeat(m.body_size || 0);
  if (body.length === 0) return [];
  const size = m.chunk_size || body.length;
  const out = [];
  for (let i = 0; i < body.length; i += size) out.push(body.slice(i, i + size));
  return out;
}

// observe records what the client and the upstream saw of a stream.
// action is the stream's state for open and check steps, '' otherwise.
function observe(s, action = '') {
  const local = s.local;
  return {
    action,
    status: local ? local.status : s.downstream ? Number(s.downstream.find((e) => e[0] === ':status')[1]) : 0,
    grpc_status: local ? local.grpcStatus : -1,
    forwarded: s.upstream !== null,
    upstream: sorted(s.upstream),
    downstream: sorted(s.downstream),
    body: local ? text(local.body) : '',
    upstream_body_bytes: s.upstreamBody.length,
    downstream_body_bytes: s.downstreamBody.length,
    reset: s.reset,
    client_read_disabled: s.dirs[REQ].flow.readDisabled,
    upstream_read_disabled: s.dirs[RESP].flow.readDisabled,
    upstream_chunks: s.dirs[REQ].flow.chunks,
    downstream_chunks: s.dirs[RESP].flow.chunks,
  };
}

// runOne runs one scenario on a fresh process, clock and plugin; mod is {bytes, module}.
function runOne(mod, sc) {
  const out = { name: sc.name, start_failed: false, start_error: '', critical_logs: [], steps: [], metrics: {} };
  const plugin = new Plugin({
    vmId: 'meshlimit', pluginName: 'istio-system.meshlimit', rootId: 'meshlimit', module: mod.module, env: sc.env,
    pluginConfig: bin(sc.config_text !== undefined ? sc.config_text : JSON.stringify(sc.config) || ''),
    workers: sc.workers || 1, bufferLimit: sc.buffer_limit, logLevel: LogLevel.info, clock: new Clock(epochNs), proc: new Process(),
  });
  try {
    plugin.load(mod.bytes);
  } catch (err) {
    out.start_failed = true;
    out.start_error = err.message;
  }
  if (!out.start_failed) {
    const open = new Map();
    for (const step of sc.steps || []) out.steps.push(runStep(plugin, open, step));
    for (const s of open.values()) s.close();
    // The counters meshlimit keeps in the guest reach the host on a tick.
    if ((sc.module || 'meshlimit') === 'meshlimit') for (const vm of plugin.vms) vm.fireTick();
  }
  out.critical_logs = plugin.logs.filter((e) => e.level === 'critical' && !e.message.startsWith('Function: ')).map((e) => text(e.message));
  out.metrics = plugin.proc.metricValues();
  out.failed_vms = plugin.vms.filter((vm) => vm.failed).map((vm) => vm.index);
  out.vm_failures = plugin.vms.filter((vm) => vm.failed).map((vm) => text(vm.failed));
  out.poll_oneoff_calls = plugin.pollCalls;
  plugin.close();
  return out;
}

// runStep runs one step and returns the list of its observations.
function runStep(plugin, open, step) {
  if (step.advance_ms !== undefined) {
    plugin.clock.advance(BigInt(step.advance_ms) * 1000000n);
    return [];
  }
  if (step.open !== undefined) {
    const req = request(step.request);
    const s = new Stream(plugin.vms[step.vm || 0], req.info);
    sendRequest(s, req);
    open.set(step.open, s);
    return [observe(s, s.state())];
  }
  if (step.check !== undefined) return [observe(open.get(step.check), open.get(step.check).state())];
  if (step.respond !== undefined) {
    const s = open.get(step.respond);
    if (s.state() === 'continue' && !s.responseStarted) finishResponse(s, response(step.response));
    return [observe(s, s.state())];
  }
  if (step.answer !== undefined) {
    // The upstream of a bidirectional stream or a WebSocket answers once the request headers went
    // upstream, whatever the request body does.
    const s = open.get(step.answer);
    if (s.upstream !== null && !s.responseStarted && s.state() !== 'stop') finishResponse(s, response(step.response));
    return [observe(s, s.state())];
  }
  if (step.send !== undefined) {
    const s = open.get(step.send);
    if (step.response) {
      if (!s.responseStarted) throw new Error('send: the upstream has not answered yet');
      sendMessage(s, RESP, response(step.response));
    } else {
      sendMessage(s, REQ, request(step.request));
    }
    return [observe(s, s.state())];
  }
  if (step.finish !== undefined) {
    const s = open.get(step.finish);
    open.delete(step.finish);
    if (s.state() === 'continue' && !s.responseStarted) finishResponse(s, response(step.response));
    s.close();
    return [observe(s)];
  }
  const obs = [];
  for (let i = 0; i < (step.repeat || 1); i++) {
    const vm = step.vms ? step.vms[i % step.vms.length] : step.vm || 0;
    obs.push(observe(roundTrip(plugin.vms[vm], request(step.request), response(step.response))));
  }
  return obs;
}

// run runs every scenario of the given files and returns {file: [results]}. modules maps a module
// name (a scenario's "module", meshlimit by default) to its file; each is compiled once, when first used.
function run(modules, files) {
  const compiled = {};
  const get = (name) => {
    if (!compiled[name]) {
      if (!modules[name]) throw new Error(`no --module ${name}=PATH given`);
      const bytes = fs.readFileSync(modules[name]);
      let module = null;
      try {
        module = new WebAssembly.Module(bytes);
      } catch (err) {
        module = null; // the loader reports why, the way Envoy would
      }
      compiled[name] = { bytes, module };
    }
    return compiled[name];
  };
  const results = {};
  for (const f of files) {
    results[path.basename(f)] = JSON.parse(fs.readFileSync(f, 'utf8')).map((sc) => runOne(get(sc.module || 'meshlimit'), sc));
  }
  return results;
}

module.exports = { run, runOne, request, upstream, epochNs };
