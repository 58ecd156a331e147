'use strict';
// Constants of the proxy-wasm ABI and WASI as Envoy uses them, guest-memory access, and the pairs
// format. Strings that cross the boundary are kept as "binary" JS strings (one char per byte, Node's
// latin1 encoding), so that bytes survive unchanged in both directions.

const Status = Object.freeze({
  OK: 0, NotFound: 1, BadArgument: 2, SerializationFailure: 3, ParseFailure: 4,
  InvalidMemoryAccess: 6, Empty: 7, CasMismatch: 8, InternalFailure: 10, BrokenConnection: 11,
  Unimplemented: 12,
});

// The WASI errno values Envoy's cpp-host returns.
const Errno = Object.freeze({ SUCCESS: 0, BADF: 8, NOTDIR: 20, INVAL: 28, NOENT: 44, NOSYS: 52, NOTSUP: 58 });

const LogLevel = Object.freeze({ trace: 0, debug: 1, info: 2, warn: 3, error: 4, critical: 5 });
const levelNames = ['trace', 'debug', 'info', 'warn', 'error', 'critical'];

// Memory reads and writes one instance's linear memory. The views are rebuilt after the memory grew
// (growth detaches the old ArrayBuffer). Out-of-range accesses throw RangeError, which host functions
// turn into InvalidMemoryAccess.
class Memory {
  constructor(memory) {
    this.memory = memory;
    this.buf = null;
    this.dv = null;
    this.u8 = null;
    this.node = null; // a Buffer over the same memory, for fast string conversions
  }

  fresh() {
    if (this.buf !== this.memory.buffer) {
      this.buf = this.memory.buffer;
      this.dv = new DataView(this.buf);
      this.u8 = new Uint8Array(this.buf);
      this.node = Buffer.from(this.buf);
    }
  }

  size() { return this.memory.buffer.byteLength; }
  u32(p) { this.fresh(); return this.dv.getUint32(p, true); }
  setU32(p, v) { this.fresh(); this.dv.setUint32(p, v >>> 0, true); }
  setU64(p, v) { this.fresh(); this.dv.setBigUint64(p, BigInt.asUintN(64, v), true); }

  // check refreshes the views and throws RangeError unless [p, p+n) is inside the memory.
  check(p, n) {
    this.fresh();
    if (p < 0 || n < 0 || p + n > this.u8.length) throw new RangeError(`memory access ${p}+${n} out of range`);
  }

  // bytes returns a view of [p, p+n), valid until the memory grows.
  bytes(p, n) {
    this.check(p, n);
    return this.u8.subarray(p, p + n);
  }

  str(p, n) {
    if (n === 0) return '';
    this.check(p, n);
    return this.node.latin1Slice(p, p + n);
  }

  write(p, bytes) {
    this.check(p, bytes.length);
    this.u8.set(bytes, p);
  }

  // writeStr writes a binary string at p.
  writeStr(p, s) {
    this.check(p, s.length);
    this.node.latin1Write(s, p, s.length);
  }
}

const bin = (s) => Buffer.from(s, 'latin1');

// asciiLower lower-cases A-Z only, like a header map does, leaving other bytes alone.
function asciiLower(s) {
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c >= 65 && c <= 90) return s.replace(/[A-Z]/g, (u) => String.fromCharCode(u.charCodeAt(0) + 32));
  }
  return s;
}

// encodePairs renders [[name, value], ...] in the pairs format: u32 count, count × (u32 name length,
// u32 value length), then each name and value followed by a NUL.
function encodePairs(pairs) {
  let size = 4 + 8 * pairs.length;
  for (const [k, v] of pairs) size += k.length + v.length + 2;
  const b = Buffer.alloc(size);
  b.writeUInt32LE(pairs.length, 0);
  let off = 4;
  for (const [k, v] of pairs) {
    b.writeUInt32LE(k.length, off);
    b.writeUInt32LE(v.length, off + 4);
    off += 8;
  }
  for (const [k, v] of pairs) {
    off += b.write(k, off, 'latin1') + 1;
    off += b.write(v, off, 'latin1') + 1;
  }
  return b;
}

// Limits of cpp-host's pairs_util: larger inputs decode as no pairs.
const pairsMaxBytes = 1 << 20;
const pairsMaxCount = 1024;

// decodePairs parses the pairs format; malformed or oversized input gives no pairs, as in cpp-host.
function decodePairs(u8) {
  const b = Buffer.from(u8.buffer, u8.byteOffset, u8.length);
  if (b.length < 4 || b.length > pairsMaxBytes) return [];
  const n = b.readUInt32LE(0);
  if (n > pairsMaxCount || b.length < 4 + 8 * n) return [];
  const out = [];
  let off = 4 + 8 * n;
  for (let i = 0; i < n; i++) {
    const kl = b.readUInt32LE(4 + 8 * i);
    const vl = b.readUInt32LE(8 + 8 * i);
    if (b.length < off + kl + vl + 2) return [];
    out.push([b.toString('latin1', off, off + kl), b.toString('latin1', off + kl + 1, off + kl + 1 + vl)]);
    off += kl + vl + 2;
  }
  return out;
}

module.exports = { Status, Errno, LogLevel, levelNames, Memory, bin, asciiLower, encodePairs, decodePairs };
