-- sliding_log_undo.lua, preceded by lib.lua, sliding_log_index.lua and taken_at.lua: gives back an
-- admission of the sliding log (algorithms.Limit.Undo). ARGV[4] is the signed delta (< 0: -delta
-- units were admitted), ARGV[7] how long ago in µs, or ARGV[10] when (taken_at.lua). It takes at
-- most -delta units out of the run stamped at exactly the admission's time, which holds the
-- admission's own units (a decision stamps them with its now, which the answer's at_us carries)
-- and those of any other admission at the same instant: never more than that run holds, and never
-- from another run, so a repeated undo gives back nothing more once the run is empty. An undo by
-- age alone (ARGV[7], no ARGV[10]: now minus an upper bound of the age) takes them out of the first
-- run at or after that time that holds units. An admission that has left the window, or a time no
-- run has, has nothing to give back (algorithms.Limit.GiveBack). Returns the units given back.
--
-- Work, whatever the log's length: a galloping search for the run from the newest (O(log d) runs
-- for the d-th newest, alone then in a block of 32), then the cumulative counts of the runs after
-- it drop by the units: in place in the (at most four) blocks the change begins or ends in, and as
-- a rise of the offset of every block wholly after it (sliding_log_index.lua), one read and one
-- write of the offsets (8 bytes a block). The clock is kept, the TTL too; a key without state is
-- left alone.

local undo = -cost
local when = taken_at()
if fresh or n == 0 or when <= math.max(now, clock) - W then
  return 0
end
-- The run: the first with a time >= when, found galloping down from the newest (an undo comes soon
-- after its admission) on runs read alone (16 bytes each), then, once at most a block of runs is
-- left, on blocks: O(log d) runs for the d-th newest.
local function later(i)
  touch()
  local p = HEAD + pos(i) * SIZE
  return (struct.unpack('<d', redis.call('GETRANGE', key, p, p + 7))) >= when
end
local lo, hi, step = 1, n, 1 -- later holds after hi
while hi >= lo do
  local probe = math.max(hi - step + 1, lo)
  if not later(probe) then
    lo = probe + 1
    break
  end
  hi, step = probe - 1, step * 2
end
while hi - lo >= BLOCK do
  local mid = floor((lo + hi) / 2)
  if later(mid) then hi = mid - 1 else lo = mid + 1 end
end
local r = search(lo, hi, function(i) return (at(i)) >= when end)
local exact = tonumber(ARGV[10] or '') ~= nil
if r > n or exact and (at(r)) ~= when then
  return 0
end
local cb = base
if r > 1 then
  local _, c = at(r - 1)
  cb = c
end
if not exact then -- by age: the first run at or after when that holds units
  r = search(r, n, function(i)
    local _, c = at(i)
    return (c - cb) % CUM > 0
  end)
  if r > n then return 0 end
  if r > 1 then
    local _, c = at(r - 1)
    cb = c
  end
end
local _, cr = at(r)
local u = math.min(undo, (cr - cb) % CUM)
if u <= 0 then
  return 0
end

-- edit lowers the counts of slots a..z (one block) in place.
local function edit(a, z)
  local raw = redis.call('GETRANGE', key, HEAD + a * SIZE, HEAD + (z + 1) * SIZE - 1)
  local out = {}
  for p = 0, z - a do
    local t, c = struct.unpack('<dd', raw, p * SIZE + 1)
    out[p + 1] = struct.pack('<dd', t, (c - u) % CUM)
  end
  redis.call('SETRANGE', key, HEAD + a * SIZE, table.concat(out))
end

local whole = {} -- the blocks wholly in the change, whose offsets rise by u
-- span lowers the counts of slots a..z: whole blocks by their offset, the others in place.
local function span(a, z)
  local b = floor(a / BLOCK)
  while a <= z do
    local e = math.min(b * BLOCK + BLOCK - 1, cap - 1)
    if a == b * BLOCK and z >= e then
      whole[#whole + 1] = b
    else
      edit(a, math.min(z, e))
    end
    a, b = e + 1, b + 1
  end
end

local emptied = u == (cr - cb) % CUM
local pr, pn = pos(r), pos(n)
if pr <= pn then
  span(pr, pn)
else
  span(pr, cap - 1)
  span(0, pn)
end
if #whole > 0 then
  local from, k = HEAD + cap * SIZE, blockCount(cap)
  if not offs then
    redis.call('SETRANGE', key, from + 8 * offCount(cap) - 1, '\0') -- zero offsets (0.0 is eight zero bytes)
    offs = true
  end
  local raw = redis.call('GETRANGE', key, from, from + 8 * k - 1)
  local vals = {}
  for b = 0, k - 1 do
    vals[b] = struct.unpack('<d', raw, 8 * b + 1)
  end
  for _, b in ipairs(whole) do
    vals[b] = (vals[b] + u) % CUM
  end
  local out = {}
  for b = 0, k - 1 do
    out[b + 1] = struct.pack('<d', vals[b])
  end
  out[k + 1] = out[1] -- block 0's again (offCount)
  redis.call('SETRANGE', key, from, table.concat(out))
end

-- The sweep: the runs an undo empties stay in place (they count nothing), and each undo that
-- empties one moves the gap (sliding_log_index.lua) past the BLOCK runs before it, keeping those
-- that hold units and dropping into the gap those that hold none; a gap that reaches the oldest
-- run leaves the ring (start moves past it), and the next sweep begins at h, the newest run
-- emptied after the gap. So each such undo reads and writes a bounded number of blocks, and the
-- slots of runs without units stay below about (q + those slots)/16 + 2: a ring of twice the
-- quota never fills, and no decision rewrites it (review attack22, finding 1).
if not emptied then
  return u
end
-- index returns the run at slot p (plus 1), or 0 (none: in the gap, or past the runs).
local function index(p1)
  if p1 == 0 then return 0 end
  local d = (p1 - 1 - start) % cap
  if d < gx then return d + 1 end
  if d < gx + g then return 0 end
  local i = d - g + 1
  if i > n then return 0 end
  return i
end
if gx == 0 then
  gx, g = r, 0
elseif r > gx and r > index(h) then
  h = pos(r) + 1
end
blocks, offsets = {}, {} -- the undo changed them
local a = math.max(1, gx - BLOCK + 1)
local prev = base
if a > 1 then
  local _, c = at(a - 1)
  prev = c
end
local kept = {}
for i = a, gx do
  local t, c = at(i)
  if (c - prev) % CUM > 0 then kept[#kept + 1] = {t, c} end
  prev = c
end
local ng = g + (gx - a + 1 - #kept)
local d0 = (start + a - 1 + ng) % cap -- the slot of the first kept run
local j = 1
while j <= #kept do
  local p = (d0 + j - 1) % cap
  local b = floor(p / BLOCK)
  local o = offset(b)
  local out = {}
  repeat
    out[#out + 1] = struct.pack('<dd', kept[j][1], (kept[j][2] + o) % CUM)
    j = j + 1
  until j > #kept or (d0 + j - 1) % cap == 0 or (d0 + j - 1) % cap % BLOCK == 0
  redis.call('SETRANGE', key, HEAD + p * SIZE, table.concat(out))
end
n = n - (gx - a + 1 - #kept)
gx, g = a - 1, ng
if gx == 0 then -- the gap leaves the ring; the next sweep begins at h
  start, g = (start + g) % cap, 0
  gx, h = index(h), 0
end
redis.call('SETRANGE', key, 0, header(clock, base))
return u
