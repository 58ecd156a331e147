'use strict';
// A reader of the parts of a Wasm binary the loader checks the way Envoy does: the function types of
// imports and exports, and imported globals. The JS WebAssembly API does not expose signatures, and a
// JS host function accepts any signature, so without this an import type mismatch would go unnoticed.

const valTypes = { 0x7f: 'i32', 0x7e: 'i64', 0x7d: 'f32', 0x7c: 'f64', 0x7b: 'v128', 0x70: 'funcref', 0x6f: 'externref' };

class Reader {
  constructor(b) { this.b = b; this.p = 0; }
  byte() { if (this.p >= this.b.length) throw new Error('wasm: unexpected end'); return this.b[this.p++]; }
  u32() {
    let result = 0, shift = 0, byte;
    do {
      byte = this.byte();
      result += (byte & 0x7f) * 2 ** shift;
      shift += 7;
    } while (byte & 0x80);
    return result;
  }
  name() { const n = this.u32(); const s = this.b.toString('utf8', this.p, this.p + n); this.p += n; return s; }
  vec(f) { const n = this.u32(); const out = []; for (let i = 0; i < n; i++) out.push(f()); return out; }
  limits() { const flags = this.byte(); this.u32(); if (flags & 1) this.u32(); }
  valType() { const t = this.byte(); return valTypes[t] || `0x${t.toString(16)}`; }
}

// parse returns {imports: [{module, name, kind, params, results}], exports: Map(name → {kind, params,
// results})}; kind is 'func', 'table', 'memory' or 'global'; params and results are set for functions.
function parse(bytes) {
  const b = Buffer.from(bytes);
  if (b.length < 8 || b.readUInt32LE(0) !== 0x6d736100) throw new Error('wasm: bad magic');
  const r = new Reader(b);
  r.p = 8;
  let types = [];
  const imports = [];
  const funcTypes = []; // type of every function: imported first, then defined
  const exports = new Map();
  while (r.p < b.length) {
    const id = r.byte();
    const size = r.u32();
    const end = r.p + size;
    if (id === 1) {
      types = r.vec(() => {
        if (r.byte() !== 0x60) throw new Error('wasm: bad function type');
        return { params: r.vec(() => r.valType()), results: r.vec(() => r.valType()) };
      });
    } else if (id === 2) {
      r.vec(() => {
        const imp = { module: r.name(), name: r.name() };
        const kind = r.byte();
        if (kind === 0) {
          Object.assign(imp, { kind: 'func' }, types[r.u32()]);
          funcTypes.push(imp);
        } else if (kind === 1) {
          r.byte();
          r.limits();
          imp.kind = 'table';
        } else if (kind === 2) {
          r.limits();
          imp.kind = 'memory';
        } else {
          r.valType();
          r.byte();
          imp.kind = 'global';
        }
        imports.push(imp);
      });
    } else if (id === 3) {
      for (const t of r.vec(() => r.u32())) funcTypes.push(types[t]);
    } else if (id === 7) {
      r.vec(() => {
        const name = r.name();
        const kind = ['func', 'table', 'memory', 'global'][r.byte()];
        const index = r.u32();
        const e = { kind };
        if (kind === 'func') Object.assign(e, { params: funcTypes[index].params, results: funcTypes[index].results });
        exports.set(name, e);
      });
    }
    r.p = end;
  }
  return { imports, exports };
}

const sigText = (ts) => (ts.length ? ts.join(' ') : 'void');

module.exports = { parse, sigText };
