'use strict';
// One HTTP stream on one VM, driven the way Envoy's filter manager drives a Wasm filter: the stream
// context is created just before proxy_on_request_headers; a callback that returns anything but
// Continue (or that sent a local reply) stops its direction, and body and trailers arriving meanwhile
// are held back and delivered on resume; local replies and resumptions take effect after the guest
// call that asked for them returns; a local reply goes through the filter's response callbacks; the
// stream ends with proxy_on_log, proxy_on_done and proxy_on_delete. Everything here is synchronous:
// a paused stream stays paused until a tick (Clock.advance) resumes it.
//
// Bodies: a body callback gets the size of the body the host holds for the filter and whether it
// is the end of the stream. Continue passes the body on (it stops being readable); StopIterationAndBuffer
// (1) makes the host buffer: each later chunk joins the buffer and the callback runs again with the
// size of the whole buffer, readable in full with proxy_get_buffer_bytes. A buffer past the
// connection's limit (bufferLimit, Envoy's per_connection_buffer_limit_bytes, 1 MiB by default) ends
// the stream: a request with a 413 local reply (request_payload_too_large), a response, whose headers
// already went downstream, with a reset. Any other stop holds later chunks back until the direction
// resumes, then delivers them as one chunk.
//
// Trailers: proxy_on_request_trailers / proxy_on_response_trailers get the number of trailers, which
// are readable as header map 1 or 3 during the call. A headers pause (StopAll) holds them back until
// the direction resumes. A body stop is not a StopAll: a filter that stopped its body (buffering, or
// any other stop) with no chunk held back is still called with the trailers, and the body it held
// is still readable then; when the trailers callback continues, the held body passes, then the
// trailers.
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
    this.reqBody = '';
    this.respHeaders = [];
    this.respTrailers = [];
    this.respBody = '';
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

  // sendBody delivers a body chunk (a binary string): to the filter, into the filter's buffer while
  // it asked for one, or held back while the direction is stopped.
  sendBody(dir, body, eos) {
    const d = this.dirs[dir];
    if (this.ended) return 'stop';
    if (d.paused && d.buffering) return this.deliverBuffered(dir, body, eos);
    if (d.paused || !d.headersPassed) {
      d.pendBody = (d.pendBody || '') + body;
      d.pendEOS = eos;
      return 'pause';
    }
    if (this.vm.failed) return this.failedVM(dir, BODY);
    return this.bodyCallback(dir, body, eos);
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
    if (d.paused && d.pausedAt === BODY && d.pendBody === undefined && !this.vm.failed) {
      // A body stop is Envoy's StopSingleIteration, not a StopAll: the filter manager still calls
      // the filter's trailers callback; continuing it lets the held body pass, then the trailers.
      d.paused = d.buffering = false;
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

  // bodyCallback adds body to what the filter holds of dir's body and calls the body callback with the
  // size of all of it.
  bodyCallback(dir, body, eos) {
    if (dir === REQ) {
      this.reqBody += body;
      this.open.reqBody = true;
      return this.callback(dir, BODY, 'proxy_on_request_body', this.reqBody.length, eos ? 1 : 0);
    }
    this.respBody += body;
    this.open.respBody = true;
    return this.callback(dir, BODY, 'proxy_on_response_body', this.respBody.length, eos ? 1 : 0);
  }

  // deliverBuffered handles a chunk while the filter buffers dir's body: it joins the buffer, and the
  // body callback runs again with the whole buffer, unless the buffer passed the limit.
  deliverBuffered(dir, body, eos) {
    const limit = this.vm.plugin.cfg.bufferLimit || DEFAULT_BUFFER_LIMIT;
    const size = (dir === REQ ? this.reqBody.length : this.respBody.length) + body.length;
    if (size > limit) return this.bufferOverflow(dir);
    this.dirs[dir].paused = false;
    return this.bodyCallback(dir, body, eos);
  }

  // bufferOverflow ends a stream whose buffered body passed the limit: 413 for a request, a reset for
  // a response.
  bufferOverflow(dir) {
    this.open.reqBody = this.open.respBody = false;
    if (dir === REQ) {
      this.sendLocalReply({ status: 413, headers: [], body: 'Payload Too Large', grpcStatus: -1, details: 'request_payload_too_large' }, false);
      return 'stop';
    }
    [this.ended, this.reset] = [true, true];
    return 'stop';
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
    this.dirs[dir].buffering = phase === BODY && res === 1 && !vm.stopNext;
    if (res === 0 && !vm.stopNext) this.passed(dir, phase);
    else Object.assign(this.dirs[dir], { paused: true, pausedAt: phase });
    vm.stopNext = false;
    vm.runDeferred();
    return this.action(dir);
  }

  // passed records that a phase went through the filter: the data moves on and stops being readable.
  passed(dir, phase) {
    const d = this.dirs[dir];
    if (dir === REQ) {
      if (phase === HEADERS) {
        this.open.reqHeaders = false;
        this.upstream = this.reqHeaders.slice(); // entries are replaced, never changed in place
        d.headersPassed = true;
      } else if (phase === BODY) {
        this.open.reqBody = false;
        this.upstreamBody += this.reqBody;
        this.reqBody = '';
      } else {
        // a body held until the trailers passes before them
        [this.open.reqTrailers, this.open.reqBody] = [false, false];
        this.upstreamBody += this.reqBody;
        this.reqBody = '';
      }
      return;
    }
    if (phase === HEADERS) {
      this.open.respHeaders = false;
      this.downstream = this.respHeaders.slice();
      d.headersPassed = true;
    } else if (phase === BODY) {
      this.open.respBody = false;
      this.downstreamBody += this.respBody;
      this.respBody = '';
    } else {
      [this.open.respTrailers, this.open.respBody] = [false, false];
      this.downstreamBody += this.respBody;
      this.respBody = '';
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

  // resume continues a direction after proxy_continue_stream and delivers held-back body, then
  // held-back trailers, as Envoy's commonContinue does (doData, then doTrailers): a body callback
  // that stops again is a single-filter stop, so the trailers still reach the filter; only a stream
  // that ended (a local reply, a reset) gets no trailers.
  resume(dir) {
    const d = this.dirs[dir];
    if (this.ended || !d.paused) return;
    d.paused = d.buffering = false;
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

  // sendLocalReply ends the stream with reply; unless the host itself failed the stream, the reply's
  // headers and body pass through the filter's response callbacks, as on Envoy's encoder path.
  sendLocalReply(reply, hostFailure) {
    if (this.ended) return;
    const vm = this.vm;
    [this.ended, this.local] = [true, reply];
    this.dirs[REQ].paused = this.dirs[RESP].paused = false;
    const h = [[':status', String(reply.status)], ...reply.headers];
    if (reply.body.length > 0) {
      h.push(['content-length', String(reply.body.length)]);
      if (!h.some((e) => e[0] === 'content-type')) h.push(['content-type', 'text/plain']);
    }
    this.responseStarted = true;
    [this.respHeaders, this.respBody] = [h, reply.body];
    if (!hostFailure && !vm.failed && this.created) {
      this.open.respHeaders = true;
      vm.call('proxy_on_response_headers', this.id, this.id, h.length, reply.body.length === 0 ? 1 : 0);
      this.open.respHeaders = false;
      if (reply.body.length > 0 && !vm.failed && vm.ex.proxy_on_response_body) {
        this.open.respBody = true;
        vm.call('proxy_on_response_body', this.id, this.id, reply.body.length, 1);
        this.open.respBody = false;
      }
      vm.runDeferred();
    }
    this.downstream = this.respHeaders.slice();
    this.downstreamBody = this.respBody;
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
  // buffering: the last body callback returned StopIterationAndBuffer.
  return { headersPassed: false, paused: false, pausedAt: HEADERS, pendBody: undefined, pendEOS: false, pendTrailers: undefined, buffering: false };
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
  const [chunks, eos, trailers] = ending(req);
  s.sendRequestHeaders(req.headers, eos && chunks.length === 0);
  chunks.forEach((c, i) => s.sendBody(REQ, c, eos && i === chunks.length - 1));
  if (trailers) s.sendTrailers(REQ, trailers);
}

// finishResponse sends the upstream response through a stream whose request was forwarded.
function finishResponse(s, resp) {
  const [chunks, eos, trailers] = ending(resp);
  s.sendResponseHeaders(resp.headers, eos && chunks.length === 0);
  chunks.forEach((c, i) => s.sendBody(RESP, c, eos && i === chunks.length - 1));
  if (trailers) s.sendTrailers(RESP, trailers);
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

module.exports = { Stream, roundTrip, sendRequest, finishResponse, REQ, RESP };
