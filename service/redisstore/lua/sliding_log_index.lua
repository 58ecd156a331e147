-- sliding_log_index.lua, preceded by lib.lua: the sliding log's state as a decision reads and
-- writes it (sliding_log.lua), without bringing the log into Lua: the script reads the header and
-- the few blocks of 32 runs its searches land in (GETRANGE), and writes a run and the header in
-- place (SETRANGE). A Lua string of the whole log would cost its every byte (Redis hashes each
-- Lua string whole): 54 µs for 1,500 runs.
--
-- Ring form, written by every decision: 'R', then struct '<ddddd' of clock (the latest now seen),
-- base, start, count and cap, then cap slots of '<dd' each. The count runs are the slots start,
-- start+1, ... (mod cap), ascending in time: a run's admission time and its cumulative count c,
-- the units of every run up to and including it plus base, modulo CUM. A run's units are
-- c(i) - c(i-1) (c(0) = base), so the units between two runs are one subtraction, and the run
-- holding the j-th live unit is a search: no decision walks the log. Dropping the oldest runs moves
-- start; a full ring doubles its cap (at most Q), moving the smaller of its two parts.
-- The text form ("clock t1 n1 t2 n2 ...", written before the ring) is read too, converted once in
-- O(n). Every run read goes through touch (counted by the tests).
--
-- Offsets: an undo (sliding_log_undo.lua) takes units out of a run, which lowers the cumulative
-- count of every run after it. Rather than rewrite them, it rewrites the few slots of the blocks
-- the change begins and ends in, and adds the units to an offset per block of 32 slots, kept
-- after the slots (cap/32 rounded up '<d' values; a key without them has none): a slot's stored
-- count minus its block's offset is its count. A run left with no units stays in place (it
-- counts nothing). A growth of the ring applies the offsets to the slots and drops them.
-- It sets clock, base, n (runs), at(i) -> t, c (run i, 1 <= i <= n), search, and the writer
-- writeLog.

local CUM = 4503599627370496 -- 2^52: counts are kept modulo it (a log holds at most 10^4 units)
local HEAD, SIZE, BLOCK = 65, 16, 32
local function touch() end

local clock, base, start, n, cap = 0, 0, 0, 0, 0
-- The sweep (sliding_log_undo.lua): the slots after run gx (0: none) hold no run, g of them; a
-- sweep is under way while gx > 0, and moves that gap toward the oldest run, dropping the runs an
-- undo emptied into it. h is the slot (plus 1; 0: none) of the newest run an undo emptied after
-- the gap, where the next sweep begins.
local gx, g, h = 0, 0, 0
local fresh = true -- no usable state in the ring form: the writer writes the key whole
local offs = false -- the key holds the blocks' offsets after its slots

-- blockCount returns the number of blocks of a ring of k slots.
local function blockCount(k) return floor((k + BLOCK - 1) / BLOCK) end
-- offCount returns the number of offsets kept after k slots: a block's each, then block 0's again,
-- so that the offsets of a block and the next are one read wherever the ring wraps.
local function offCount(k) return blockCount(k) + 1 end

-- toRing returns the ring form of clock c and the runs of text form vals, or nil (unusable).
local function toRing(vals)
  if #vals % 2 ~= 1 then return nil end
  local c = field(vals[1], MAX_TIME)
  if c == nil then return nil end
  local slots, prev, cum = {}, 0, 0
  for i = 2, #vals - 1, 2 do
    touch()
    local t, u = field(vals[i], MAX_TIME), field(vals[i + 1], MAX_QUOTA)
    if t == nil or u == nil or u < 1 or t < prev or t > c then return nil end
    cum, prev = (cum + u) % CUM, t
    slots[#slots + 1] = struct.pack('<dd', t, cum)
  end
  return 'S' .. struct.pack('<dddddddd', c, 0, 0, #slots, #slots, 0, 0, 0) .. table.concat(slots)
end

local head = redis.call('GETRANGE', key, 0, HEAD - 1)
if head ~= '' and string.find('RS', string.sub(head, 1, 1), 1, true) == nil then
  local vals = {}
  for v in string.gmatch(redis.call('GET', key), '%S+') do vals[#vals + 1] = v end
  local ring = toRing(vals)
  if ring then
    redis.call('SET', key, ring, 'KEEPTTL')
    head = string.sub(ring, 1, HEAD)
  end
end
if #head == HEAD and string.sub(head, 1, 1) == 'S' then
  local c, b, s, m, k, x, y, z = struct.unpack('<dddddddd', head, 2)
  if field(c, MAX_TIME) ~= nil and field(b, CUM - 1) ~= nil and field(k, MAX_QUOTA) ~= nil and
      field(m, k) ~= nil and (field(s, k - 1) ~= nil or k == 0 and s == 0) and field(x, m) ~= nil and
      field(y, k - m) ~= nil and field(z, k) ~= nil then
    local len = redis.call('STRLEN', key)
    if len == HEAD + k * SIZE or k > 0 and len == HEAD + k * SIZE + 8 * offCount(k) then
      clock, base, start, n, cap, fresh = c, b, s, m, k, false
      gx, g, h = x, y, z
      offs = len ~= HEAD + k * SIZE
    end
  end
end

-- pos returns run i's slot: the gap's g slots lie after run gx.
local function pos(i)
  if i > gx then return (start + i - 1 + g) % cap end
  return (start + i - 1) % cap
end

-- header returns the header of the ring with clock c and base b.
local function header(c, b)
  return 'S' .. struct.pack('<dddddddd', c, b, start, n, cap, gx, g, h)
end

local blocks, offsets = {}, {}
-- offset returns block b's offset (0 without offsets).
-- It reads the offsets of blocks b and b + 1 in one GETRANGE: a decision that reads its newest
-- run's block writes the next run in that block or the next.
local function offset(b)
  if not offs then return 0 end
  local o = offsets[b]
  if o == nil then
    local from = HEAD + cap * SIZE + 8 * b
    local raw = redis.call('GETRANGE', key, from, from + 15)
    o = struct.unpack('<d', raw)
    offsets[b] = o
    local nb = (b + 1) % blockCount(cap)
    if #raw == 16 and offsets[nb] == nil then offsets[nb] = struct.unpack('<d', raw, 9) end
  end
  return o
end

-- at returns run i's time and cumulative count.
local function at(i)
  touch()
  local p = pos(i)
  local b = floor(p / BLOCK)
  local blk = blocks[b]
  if blk == nil then
    local from = HEAD + b * BLOCK * SIZE
    blk = redis.call('GETRANGE', key, from, from + BLOCK * SIZE - 1)
    blocks[b] = blk
  end
  local t, c = struct.unpack('<dd', blk, (p - b * BLOCK) * SIZE + 1)
  if offs then c = (c - offset(b)) % CUM end
  return t, c
end

-- search returns the first i in [lo, hi] for which pred(i) holds, or hi + 1; pred is false and
-- then true over the range. It gallops from lo, so that it reads O(log d) runs for an answer d
-- runs after lo (the expired runs, or the runs that hold a cost's units).
local function search(lo, hi, pred)
  local step = 1
  while lo <= hi do
    local probe = math.min(lo + step - 1, hi)
    if pred(probe) then
      hi = probe - 1
      break
    end
    lo, step = probe + 1, step * 2
  end
  while lo <= hi do
    local mid = floor((lo + hi) / 2)
    if pred(mid) then hi = mid - 1 else lo = mid + 1 end
  end
  return lo
end

-- slot writes run (t, c) at ring slot p.
local function slot(p, t, c)
  if offs then c = (c + offset(floor(p / BLOCK))) % CUM end
  redis.call('SETRANGE', key, HEAD + p * SIZE, struct.pack('<dd', t, c))
end

-- compact rewrites the ring without its gap, its runs that hold no units (an undo's,
-- sliding_log_undo.lua) and its offsets, from slot 0, at the same cap: O(cap), and only when the
-- ring grows (grow). nb is the count before the first run.
local function compact(nb)
  local raw = redis.call('GETRANGE', key, HEAD, HEAD + cap * SIZE + 8 * blockCount(cap) - 1)
  local out, prev = {}, nb
  for i = 1, n do
    local p = pos(i)
    local t, c = struct.unpack('<dd', raw, p * SIZE + 1)
    if offs then c = (c - struct.unpack('<d', raw, cap * SIZE + 8 * floor(p / BLOCK) + 1)) % CUM end
    if c ~= prev then out[#out + 1] = struct.pack('<dd', t, c) end
    prev = c
  end
  start, n, gx, g, h = 0, #out, 0, 0, 0
  out[#out + 1] = string.rep('\0', (cap - n) * SIZE)
  redis.call('SET', key, header(clock, base) .. table.concat(out), 'KEEPTTL')
  offs, blocks, offsets = false, {}, {}
end

-- grow doubles the ring's cap (at least 4, at most twice q unless more are needed), moving the
-- smaller of the ring's two parts: [0, start) after the old slots, or [start, cap) to the end; a
-- ring with offsets or a gap is compacted first (compact), and a ring of twice q only compacted
-- while that frees a slot: the sweep (sliding_log_undo.lua) keeps the slots of runs an undo
-- emptied below q/8 or so, so that a ring of twice q never fills. nb is the count before the
-- first run.
local function grow(q, nb)
  local limit = 2 * q
  if cap > 0 and not fresh and (offs or g > 0 or cap >= limit) then
    compact(nb)
    if cap >= limit and n < cap then return end
  end
  local k = math.max(math.min(math.max(4, 2 * cap), limit), n + 1)
  if cap == 0 or fresh then
    redis.call('SET', key, 'S' .. struct.pack('<dddddddd', 0, 0, 0, 0, k, 0, 0, 0) .. string.rep('\0', k * SIZE))
    start, n, cap, fresh, gx, g, h = 0, 0, k, false, 0, 0, 0
    return
  end
  local tail = cap - start
  if start == 0 then
    redis.call('SETRANGE', key, HEAD + k * SIZE - 1, '\0')
  elseif start <= tail and cap + start <= k then
    local part = redis.call('GETRANGE', key, HEAD, HEAD + start * SIZE - 1)
    redis.call('SETRANGE', key, HEAD + cap * SIZE, part)
    if cap + start < k then redis.call('SETRANGE', key, HEAD + k * SIZE - 1, '\0') end
  else
    local part = redis.call('GETRANGE', key, HEAD + start * SIZE, HEAD + cap * SIZE - 1)
    redis.call('SETRANGE', key, HEAD + (k - tail) * SIZE, part)
    start = k - tail
  end
  cap, h = k, 0
end

-- writeLog keeps runs keep..n (with base nb before them), then appends the admitted cost at eff,
-- merged into the last kept run when it has that time (cost 0: none), and writes the clock eff,
-- the header, and the TTL (ttl, lib.lua). q is the quota. Dropping the runs up to the gap drops
-- the gap (and ends the sweep).
local function writeLog(eff, keep, nb, cost, q)
  local d = keep - 1
  if n > 0 and d > 0 then
    if d >= gx then
      start, gx, g = (start + d + (gx > 0 and g or 0)) % cap, 0, 0
    else
      start, gx = (start + d) % cap, gx - d
    end
  end
  n = n - d
  if cost > 0 then
    local last, lastc = 0, nb
    if n > 0 then last, lastc = at(n) end
    if n > 0 and last == eff then
      slot(pos(n), eff, (lastc + cost) % CUM)
    else
      -- a ring below twice q grows while it keeps room for the runs undos empty until swept
      if n + g >= cap or fresh or cap < 2 * q and n + g >= cap - floor((n + g) / 8) - 4 then grow(q, nb) end
      n = n + 1
      slot(pos(n), eff, (lastc + cost) % CUM)
    end
  end
  if fresh then grow(q, nb) end
  redis.call('SETRANGE', key, 0, header(eff, nb))
  redis.call('PEXPIRE', key, ttl)
end
