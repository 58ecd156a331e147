'use strict';
// Envoy's property paths (proxy_get_property): NUL-separated segments, strings as raw bytes, integers
// as 8 little-endian bytes, maps in the pairs format. request.*, response.*, source.* and destination.*
// need a stream; plugin_* and xds.* work everywhere. Injected values (scenario properties) win, values
// set with proxy_set_property (filter state) come last.
const { asciiLower, encodePairs } = require('./abi');

const defaults = { source: '127.0.0.1:40000', destination: '127.0.0.1:10000', protocol: 'HTTP/1.1' };

function int64(n) {
  const b = Buffer.alloc(8);
  b.writeBigInt64LE(BigInt(n));
  return b.toString('latin1');
}

const leaf = (v, rest) => (rest.length || v === undefined || v === '' ? undefined : v);
const first = (h, name) => (h.find((e) => e[0] === name) || [])[1];

// property returns the value of path (a binary string) or undefined for NotFound.
function property(vm, path) {
  const st = vm.stream();
  const cfg = vm.plugin.cfg;
  if (st && st.info.properties && path in st.info.properties) return st.info.properties[path];
  if (cfg.properties && path in cfg.properties) return cfg.properties[path];
  const [top, ...rest] = path.split('\0');
  const v = builtin(vm, st, top, rest);
  if (v !== undefined) return v;
  return (st ? st.filterState : vm.filterState).get(path);
}

function builtin(vm, st, top, rest) {
  const cfg = vm.plugin.cfg;
  switch (top) {
    case 'plugin_name': return rest.length ? undefined : cfg.pluginName;
    case 'plugin_root_id': return rest.length ? undefined : cfg.rootId;
    case 'plugin_vm_id': return rest.length ? undefined : cfg.vmId;
    case 'xds': return xds(st, cfg, rest);
  }
  if (!st) return undefined;
  switch (top) {
    case 'request': return request(st, rest);
    case 'response': return response(st, rest);
    case 'source': return address(st.info.source || defaults.source, rest);
    case 'destination': return address(st.info.destination || defaults.destination, rest);
  }
  return undefined;
}

function xds(st, cfg, [field, ...rest]) {
  const node = cfg.node || {};
  switch (field) {
    case 'route_name': return st ? leaf(st.info.routeName, rest) : undefined;
    case 'cluster_name': return st ? leaf(st.info.clusterName, rest) : undefined;
    case 'node':
      if (rest[0] === 'id' || rest[0] === 'cluster') return rest.length === 1 ? node[rest[0]] || '' : undefined;
      if (rest[0] === 'metadata' && rest.length === 2) return (node.metadata || {})[rest[1]];
  }
  return undefined;
}

function request(st, [field, ...rest]) {
  const h = st.reqHeaders;
  const path = first(h, ':path');
  switch (field) {
    case 'path': return rest.length ? undefined : path;
    case 'url_path': return path === undefined || rest.length ? undefined : path.split('?')[0];
    case 'query': {
      if (path === undefined || rest.length) return undefined;
      const i = path.indexOf('?');
      return i < 0 ? '' : path.slice(i + 1);
    }
    case 'host': return rest.length ? undefined : first(h, ':authority');
    case 'method': return rest.length ? undefined : first(h, ':method');
    case 'scheme': return rest.length ? undefined : first(h, ':scheme');
    case 'id': return rest.length ? undefined : first(h, 'x-request-id');
    case 'protocol': return rest.length ? undefined : st.info.protocol || defaults.protocol;
    case 'time': return rest.length ? undefined : int64(st.start);
    case 'headers': return headers(h, rest);
  }
  return undefined;
}

function response(st, [field, ...rest]) {
  if (!st.responseStarted) return undefined;
  if (field === 'code') {
    const code = Number(first(st.respHeaders, ':status'));
    return Number.isInteger(code) && !rest.length ? int64(code) : undefined;
  }
  return field === 'headers' ? headers(st.respHeaders, rest) : undefined;
}

// headers returns the whole map in the pairs format, or one header with its values comma-joined.
function headers(h, rest) {
  if (!rest.length) return encodePairs(h).toString('latin1');
  const name = asciiLower(rest[0]);
  const vals = h.filter((e) => e[0] === name).map((e) => e[1]);
  return vals.length ? vals.join(',') : undefined;
}

function address(addr, [field, ...rest]) {
  if (rest.length) return undefined;
  if (field === 'address') return addr;
  if (field === 'port') {
    const m = /:(\d+)$/.exec(addr);
    return m ? int64(Number(m[1])) : undefined;
  }
  return undefined;
}

module.exports = { property };
