'use strict';
// One HTTP stream on one VM, driven the way Envoy's filter manager drives a Wasm filter: the stream
// context is created just before proxy_on_request_headers; a callback that returns anything but
// Continue (or that sent a local reply) stops its direction, and body and trailers arriving meanwhile
// are held back and delivered on resume; local replies and resumptions take effect after the guest
// call that asked for them returns; a local reply goes through the filter's response callbacks; the
// stream ends with proxy_on_log, proxy_on_done and proxy_on_delete. Everything here is synchronous:
// a paused stream stays paused until a tick (Clock.advance) resumes it.
//
// Bodies (docs/envoy-host.md §13): a direction stopped on its headers holds later chunks back and
// delivers them to the filter as one chunk on resume. A body callback's result is a single-iteration
// stop otherwise: every new chunk still reaches the filter. 0 lets the chunk go on, and after an earlier
// stop everything held with it, in one write; 1 (StopIterationAndBuffer) holds the chunk, and the next
// callbacks get, and may read, the whole held body; 2 (StopIterationAndWatermark) holds the chunk, and
// the next callbacks get their own chunk only; 3 (StopIterationNoBuffer, also any larger value and any
// callback that sent a local reply) drops the chunk. proxy_continue_stream after a body stop lets what is
// held go on in one write without another body callback. The held body is bounded by the connection's
// limit (bufferLimit, Envoy's per_connection_buffer_limit_bytes, 1 MiB by default): past it, data held
// for the filter to read (1) ends the stream (413 for a request, 500 for a response, a reset once the
// response went downstream); data held for flow control (2, or a headers stop) makes Envoy stop reading
// from the sender (flow.readDisabled) until the buffer drains to half the limit.
//
// Local replies (§4, §13): before any response headers, through the filter's response callbacks; while
// the filter holds the upstream's response headers, straight to the client; once response headers went
// downstream, a reset. A gRPC request gets a trailers-only reply (:status 200, grpc-status,
// grpc-message) without a body.
//
// Trailers: proxy_on_request_trailers / proxy_on_response_trailers get the number of trailers, which
// are readable as header map 1 or 3 during the call. A headers pause (StopAll) holds them back until
// the direction resumes. A body stop is not a StopAll: a filter that stopped its body is still called
// with the trailers, and the body it buffered is still readable then; when the trailers callback
// continues, the held body passes, then the trailers.
const { asciiLower } = require('./abi');

const REQ = 0;
const RESP = 1;
const HEADERS = 0;
const BODY = 1;
const TRAILERS = 2;

// DEFAULT_BUFFER_LIMIT is Envoy's default per_connection_buffer_limit_bytes.
const DEFAULT_BUFFER_LIMIT = 1 << 20;

const lowerAll = (h) => h.map(([k, v]) => [asciiLower(k), v]);

class Stream {
  constructor(vm, info) {
    this.vm = vm;
    this.info = info;
    this.id = 0;
    this.created = false;
    this.closed = false;
    this.ended = false;
    this.responseStarted = false;
    this.reqHeaders = [];
    this.reqTrailers = [];
    this.respHeaders = [];
    this.respTrailers = [];
    this.grpc = false; // the request's content-type is gRPC's (Envoy's is_grpc_request_)
    this.open = { reqHeaders: false, reqBody: false, reqTrailers: false, respHeaders: false, respBody: false, respTrailers: false };
    this.dirs = [newDirection(), newDirection()];
    this.upstream = null; // request headers as forwarded
    this.downstream = null; // response headers as sent downstream
    this.upstreamBody = ''; // the request body forwarded so far
    this.downstreamBody = ''; // the response body sent downstream so far
    this.local = null;
    this.reset = false;
    this.localReplyHold = false;
    this.filterState = new Map();
  }

  // sendRequestHeaders creates the stream context and calls proxy_on_request_headers; it returns the
  // request direction's state: 'continue', 'pause' or 'stop'.
  sendRequestHeaders(h, eos) {
    const vm = this.vm;
    this.start = vm.plugin.clock.now;
    this.reqHeaders = lowerAll(h);
    this.grpc = isGRPC(this.reqHeaders);
    if (vm.failed) return this.failedVM(REQ, HEADERS);
    this.id = ++vm.nextId;
    vm.streams.set(this.id, this);
    this.created = true;
    if (vm.ex.proxy_on_context_create && vm.call('proxy_on_context_create', this.id, this.id, vm.rootId) === undefined) {
      return this.failedVM(REQ, HEADERS);
    }
    this.open.reqHeaders = true;
    return this.callback(REQ, HEADERS, 'proxy_on_request_headers', this.reqHeaders.length, eos ? 1 : 0);
  }

  sendResponseHeaders(h, eos) {
    if (this.ended) return 'stop';
    if (!this.dirs[REQ].headersPassed || this.responseStarted) throw new Error('v8host: stream method called out of order');
    this.responseStarted = true;
    this.respHeaders = lowerAll(h);
    if (this.vm.failed) return this.failedVM(RESP, HEADERS);
    this.open.respHeaders = true;
    return this.callback(RESP, HEADERS, 'proxy_on_response_headers', this.respHeaders.length, eos ? 1 : 0);
  }

  // sendBody delivers a body chunk (a binary string): to the filter's body callback, or held back
  // while the direction is stopped on its headers (or its trailers).
  sendBody(dir, body, eos) {
    const d = this.dirs[dir];
    if (this.ended) return 'stop';
    if ((d.paused && d.pausedAt !== BODY) || !d.headersPassed) {
      d.pendBody = (d.pendBody || '') + body;
      d.pendEOS = eos;
      this.filled(dir, true); // a headers stop is StopAllIterationAndWatermark
      return 'pause';
    }
    if (this.vm.failed) return this.failedVM(dir, BODY);
    return this.offerBody(dir, body, eos);
  }

  // sendTrailers delivers dir's trailers: to the filter, or held back while the direction is
  // stopped (a headers pause, or body chunks still held back).
  sendTrailers(dir, h) {
    return this.deliverTrailers(dir, lowerAll(h));
  }

  // deliverTrailers calls dir's trailers callback, or holds the trailers back while dir is stopped
  // for all frames; a filter that stopped only its body is called.
  deliverTrailers(dir, h) {
    const d = this.dirs[dir];
    if (this.ended) return 'stop';
    if (d.paused && d.pausedAt === BODY && !this.vm.failed) {
      // A body stop is Envoy's StopSingleIteration, not a StopAll: the filter manager still calls
      // the filter's trailers callback; continuing it lets the held body pass, then the trailers.
      d.paused = false;
    }
    if (d.paused || !d.headersPassed) {
      d.pendTrailers = h;
      return 'pause';
    }
    if (this.vm.failed) return this.failedVM(dir, TRAILERS);
    if (dir === REQ) {
      [this.reqTrailers, this.open.reqTrailers] = [h, true];
      return this.callback(dir, TRAILERS, 'proxy_on_request_trailers', h.length);
    }
    [this.respTrailers, this.open.respTrailers] = [h, true];
    return this.callback(dir, TRAILERS, 'proxy_on_response_trailers', h.length);
  }

  // offerBody calls dir's body callback with one chunk: after StopIterationAndBuffer the chunk joins
  // the held body first and the callback gets the size of all of it, otherwise of this chunk alone.
  offerBody(dir, body, eos) {
    const vm = this.vm;
    const d = this.dirs[dir];
    let size = body.length;
    if (d.buffering) {
      d.held += body;
      if (this.filled(dir, false)) return 'stop';
      [size, d.chunk] = [d.held.length, ''];
    } else {
      d.chunk = body;
    }
    const name = dir === REQ ? 'proxy_on_request_body' : 'proxy_on_response_body';
    if (!vm.ex[name]) {
      this.passed(dir, BODY);
      return this.action(dir);
    }
    this.setBodyOpen(dir, true);
    vm.stopNext = false;
    let res = vm.call(name, this.id, this.id, size, eos ? 1 : 0);
    if (res === undefined) return this.failedVM(dir, BODY);
    res >>>= 0;
    if (vm.stopNext || res > 3) res = 3; // cpp-host: after a local reply, or past the enum, StopIterationNoBuffer
    vm.stopNext = false;
    this.afterBody(dir, res);
    vm.runDeferred();
    return this.action(dir);
  }

  // afterBody applies a body callback's result, as Envoy's commonHandleAfterDataCallback does.
  afterBody(dir, r) {
    const d = this.dirs[dir];
    if (r !== 1) this.setBodyOpen(dir, false); // the chunk is not the filter's to read any more
    if (r === 0) {
      this.passed(dir, BODY);
      return;
    }
    if (r === 1 || r === 2) {
      if (!d.buffering) d.held += d.chunk;
      d.buffering = r === 1;
      Object.assign(d, { paused: true, pausedAt: BODY });
      this.filled(dir, r === 2);
    } else {
      d.buffering = false;
      Object.assign(d, { paused: true, pausedAt: BODY });
    }
    d.chunk = '';
  }

  // release lets what the filter manager holds for dir go on in one write, without a body callback.
  release(dir) {
    const d = this.dirs[dir];
    if (d.held.length > 0) {
      if (dir === REQ) this.upstreamBody += d.held;
      else this.downstreamBody += d.held;
      d.flow.chunks++;
    }
    d.held = '';
    d.paused = d.buffering = false;
    this.setBodyOpen(dir, false);
    this.drained(dir);
  }

  // filled checks dir's held data against the limit once per crossing: held for the filter's reading,
  // the stream fails (and filled reports true); held for flow control, Envoy stops reading the sender.
  filled(dir, streaming) {
    const d = this.dirs[dir];
    if (d.aboveHigh || d.held.length + (d.pendBody || '').length <= this.bufferLimit()) return false;
    d.aboveHigh = true;
    if (streaming) {
      d.flow.readDisabled = true;
      d.flow.pauses++;
      return false;
    }
    this.tooLarge(dir);
    return true;
  }

  // drained re-enables reading from dir's sender once its buffer is down to half the limit.
  drained(dir) {
    const d = this.dirs[dir];
    if (d.aboveHigh && d.held.length + (d.pendBody || '').length <= Math.floor(this.bufferLimit() / 2)) {
      d.aboveHigh = d.flow.readDisabled = false;
    }
  }

  bufferLimit() {
    return this.vm.plugin.cfg.bufferLimit || DEFAULT_BUFFER_LIMIT;
  }

  // tooLarge ends a stream whose buffered body passed the limit: a 413 for a request, a 500 for a
  // response, each a reset once response headers went downstream.
  tooLarge(dir) {
    this.open.reqBody = this.open.respBody = false;
    if (dir === REQ) {
      this.sendLocalReply({ status: 413, headers: [], body: 'Payload Too Large', grpcStatus: -1, details: 'request_payload_too_large' }, false);
    } else {
      this.sendLocalReply({ status: 500, headers: [], body: 'Internal Server Error', grpcStatus: -1, details: 'response_payload_too_large' }, false);
    }
  }

  setBodyOpen(dir, open) {
    if (dir === REQ) this.open.reqBody = open;
    else this.open.respBody = open;
  }

  // bodyView is dir's body buffer as the guest sees it: all that is held while the filter buffers,
  // else the chunk of the callback in progress; setBodyView replaces it.
  bodyView(dir) {
    const d = this.dirs[dir];
    return d.buffering ? d.held : d.chunk;
  }

  setBodyView(dir, b) {
    const d = this.dirs[dir];
    if (d.buffering) d.held = b;
    else d.chunk = b;
  }

  // callback calls a stream callback: a failed call answers 503 (or passes when fail-open); 0 without
  // a local reply continues; anything else stops the direction. Deferred effects run afterwards.
  callback(dir, phase, name, a, b) {
    const vm = this.vm;
    if (!vm.ex[name]) {
      this.passed(dir, phase);
      return this.action(dir);
    }
    vm.stopNext = false;
    const res = vm.call(name, this.id, this.id, a, b);
    if (res === undefined) return this.failedVM(dir, phase);
    if (res === 0 && !vm.stopNext) this.passed(dir, phase);
    else Object.assign(this.dirs[dir], { paused: true, pausedAt: phase });
    vm.stopNext = false;
    vm.runDeferred();
    return this.action(dir);
  }

  // passed records that a phase went through the filter: the data moves on and stops being readable;
  // a body held until the trailers passes before them.
  passed(dir, phase) {
    const d = this.dirs[dir];
    if (phase === BODY) {
      d.held += d.chunk; // empty while buffering: the chunk joined the held body first
      d.chunk = '';
      this.release(dir);
    } else if (phase === TRAILERS) {
      if (dir === REQ) this.open.reqTrailers = false;
      else this.open.respTrailers = false;
      this.release(dir);
    } else if (dir === REQ) {
      this.open.reqHeaders = false;
      this.upstream = this.reqHeaders.slice(); // entries are replaced, never changed in place
      d.headersPassed = true;
    } else {
      this.open.respHeaders = false;
      this.downstream = this.respHeaders.slice();
      d.headersPassed = true;
    }
  }

  action(dir) {
    const d = this.dirs[dir];
    if (this.ended) return 'stop';
    return d.paused || d.pendBody !== undefined || d.pendTrailers !== undefined ? 'pause' : 'continue';
  }

  // state is the stream's state over both directions.
  state() {
    const a = this.action(REQ);
    return a === 'continue' ? this.action(RESP) : a;
  }

  // resume continues a direction after proxy_continue_stream. After a body stop, what is held goes on
  // in one write without another body callback; after a trailers stop, the held body and the trailers;
  // after a headers stop, the headers pass and the held-back body is delivered to the filter as one
  // chunk, then the held-back trailers, as Envoy's commonContinue does (doData, then doTrailers).
  resume(dir) {
    const d = this.dirs[dir];
    if (this.ended || !d.paused) return;
    d.paused = false;
    if (d.pausedAt === BODY) {
      this.release(dir);
      return;
    }
    this.passed(dir, d.pausedAt);
    if (d.pendBody !== undefined) {
      const [body, eos] = [d.pendBody, d.pendEOS];
      d.pendBody = undefined;
      this.sendBody(dir, body, eos);
      if (this.ended) return;
    }
    if (d.pendTrailers !== undefined) {
      const h = d.pendTrailers;
      d.pendTrailers = undefined;
      this.deliverTrailers(dir, h);
    }
  }

  resetStream() {
    if (!this.ended) [this.ended, this.reset] = [true, true];
  }

  // failedVM answers a stream on a failed VM: pass when fail-open, else 503 wasm_fail_stream.
  failedVM(dir, phase) {
    this.vm.deferred = [];
    if (this.vm.plugin.cfg.failOpen) {
      if (!this.ended) {
        this.dirs[dir].paused = false;
        this.passed(dir, phase);
      }
      return this.action(dir);
    }
    this.sendLocalReply({ status: 503, headers: [], body: '', grpcStatus: 14, details: 'wasm_fail_stream' }, true);
    return 'stop';
  }

  // sendLocalReply ends the stream with reply as Envoy's DownstreamFilterManager does: before any
  // response headers, through the filter's response callbacks (unless the host itself failed the
  // stream); while the filter holds the upstream's response headers, straight to the client; once
  // response headers went downstream, a reset (the reply is dropped).
  sendLocalReply(reply, hostFailure) {
    if (this.ended) return;
    const vm = this.vm;
    this.ended = true;
    this.dirs[REQ].paused = this.dirs[RESP].paused = false;
    this.open.reqBody = this.open.respBody = false;
    const d = this.dirs[RESP];
    if (d.headersPassed) {
      this.reset = true;
      return;
    }
    this.local = reply;
    const [h, body] = this.localReplyHeaders(reply);
    if (this.responseStarted) {
      [this.downstream, this.downstreamBody] = [h, body];
      if (body.length > 0) d.flow.chunks++;
      return;
    }
    this.responseStarted = true;
    [this.respHeaders, d.chunk, d.buffering] = [h, body, false];
    if (!hostFailure && !vm.failed && this.created) {
      this.open.respHeaders = true;
      vm.call('proxy_on_response_headers', this.id, this.id, h.length, body.length === 0 ? 1 : 0);
      this.open.respHeaders = false;
      if (body.length > 0 && !vm.failed && vm.ex.proxy_on_response_body) {
        this.open.respBody = true;
        vm.call('proxy_on_response_body', this.id, this.id, body.length, 1);
        this.open.respBody = false;
      }
      vm.runDeferred();
    }
    this.downstream = this.respHeaders.slice();
    this.downstreamBody = d.chunk;
    if (d.chunk.length > 0) d.flow.chunks++;
    d.chunk = '';
  }

  // localReplyHeaders renders a local reply as Envoy's Utility::prepareLocalReply does: a gRPC request
  // gets a trailers-only response without a body (grpc-status: a header the filter passed, else the
  // filter's gRPC status, else the one Envoy maps from the HTTP status; grpc-message: the body,
  // percent-encoded); any other gets its status, the filter's headers and, with a body, content-length
  // and a text/plain content-type.
  localReplyHeaders(reply) {
    if (!this.grpc) {
      const h = [[':status', String(reply.status)], ...reply.headers];
      if (reply.body.length > 0) {
        h.push(['content-length', String(reply.body.length)]);
        if (!h.some((e) => e[0] === 'content-type')) h.push(['content-type', 'text/plain']);
      }
      return [h, reply.body];
    }
    const keep = (k) => k !== 'content-type' && k !== 'content-length' && (k !== 'grpc-message' || reply.body.length === 0);
    const h = [[':status', '200'], ...reply.headers.filter(([k]) => keep(k)), ['content-type', 'application/grpc']];
    if (!h.some((e) => e[0] === 'grpc-status')) {
      h.push(['grpc-status', String(reply.grpcStatus >= 0 ? reply.grpcStatus : httpToGRPCStatus(reply.status))]);
    }
    if (reply.body.length > 0) h.push(['grpc-message', percentEncode(reply.body)]);
    return [h, ''];
  }

  // close calls proxy_on_log, proxy_on_done and proxy_on_delete when the context was created on a
  // healthy VM.
  close() {
    const vm = this.vm;
    if (this.closed) return;
    this.closed = true;
    if (this.created && !vm.failed && !vm.closed) {
      vm.call('proxy_on_log', this.id, this.id);
      vm.call('proxy_on_done', this.id, this.id);
      vm.call('proxy_on_delete', this.id, this.id);
      vm.deferred = [];
    }
    vm.streams.delete(this.id);
    this.ended = true;
  }
}

function newDirection() {
  // chunk: the chunk of the body callback in progress; held: what the filter manager holds (the chunks
  // stopped with 1 or 2); buffering: the last body callback returned StopIterationAndBuffer; aboveHigh:
  // held passed the limit and has not drained to half of it.
  return {
    headersPassed: false, paused: false, pausedAt: HEADERS, pendBody: undefined, pendEOS: false, pendTrailers: undefined,
    chunk: '', held: '', buffering: false, aboveHigh: false, flow: { readDisabled: false, pauses: 0, chunks: 0 },
  };
}

// isGRPC is Envoy's Grpc::Common::isGrpcRequestHeaders: a :path and a content-type that is
// application/grpc or starts with application/grpc+.
function isGRPC(h) {
  if (!h.some((e) => e[0] === ':path')) return false;
  const ct = (h.find((e) => e[0] === 'content-type') || [])[1];
  return ct !== undefined && ct.startsWith('application/grpc') && (ct.length === 16 || ct[16] === '+');
}

// httpToGRPCStatus is Envoy's Grpc::Utility::httpToGrpcStatus.
function httpToGRPCStatus(status) {
  return { 400: 13, 401: 16, 403: 7, 404: 12, 429: 14, 502: 14, 503: 14, 504: 14 }[status] || 2;
}

// percentEncode is Envoy's PercentEncoding::encode for grpc-message (a binary string in and out).
function percentEncode(b) {
  let out = '';
  for (let i = 0; i < b.length; i++) {
    const c = b.charCodeAt(i);
    out += c < 0x20 || c >= 0x7e || c === 0x25 ? '%' + c.toString(16).toUpperCase().padStart(2, '0') : b[i];
  }
  return out;
}

// roundTrip runs a whole request lifecycle: request headers, body and trailers, then, unless the
// stream stopped or paused, the upstream response, then close. It returns the stream. req and resp
// have headers and either body (one chunk) or chunks (each a binary string), and may have trailers
// (a list of [name, value]), which end the stream instead of the last chunk; endStream false leaves
// the last chunk (or the headers) without end_of_stream and sends no trailers: the client never
// finishes the request, or resets the stream before the response ends.
function roundTrip(vm, req, resp) {
  const s = new Stream(vm, req.info || {});
  sendRequest(s, req);
  if (s.state() === 'continue' && resp) finishResponse(s, resp);
  s.close();
  return s;
}

// sendRequest sends a request's headers, body chunks and trailers through a new stream.
function sendRequest(s, req) {
  const [chunks, eos] = ending(req);
  s.sendRequestHeaders(req.headers, eos && chunks.length === 0);
  sendMessage(s, REQ, req);
}

// finishResponse sends the upstream response through a stream whose request was forwarded.
function finishResponse(s, resp) {
  const [chunks, eos] = ending(resp);
  s.sendResponseHeaders(resp.headers, eos && chunks.length === 0);
  sendMessage(s, RESP, resp);
}

// sendMessage sends a message's body chunks, then its trailers, through one direction of s.
function sendMessage(s, dir, m) {
  const [chunks, eos, trailers] = ending(m);
  chunks.forEach((c, i) => s.sendBody(dir, c, eos && i === chunks.length - 1));
  if (trailers) s.sendTrailers(dir, trailers);
}

// ending is how a message ends: its chunks, whether the last chunk (or the headers) carries
// end_of_stream, and the trailers that end it instead (null when none are sent).
function ending(m) {
  const trailers = m.endStream !== false && m.trailers ? m.trailers : null;
  return [bodyChunks(m), m.endStream !== false && !trailers, trailers];
}

function bodyChunks(m) {
  if (m.chunks) return m.chunks;
  return m.body && m.body.length > 0 ? [m.body] : [];
}

module.exports = { Stream, roundTrip, sendRequest, finishResponse, sendMessage, REQ, RESP };
