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
  local p = HEAD + ((start + i - 1) % cap) * SIZE
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

local pr, pn = (start + r - 1) % cap, (start + n - 1) % cap
if pr <= pn then
  span(pr, pn)
else
  span(pr, cap - 1)
  span(0, pn)
end
if #whole > 0 then
  local from, k = HEAD + cap * SIZE, blockCount(cap)
  if not offs then
    redis.call('SETRANGE', key, from + 8 * k - 1, '\0') -- zero offsets (0.0 is eight zero bytes)
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
  redis.call('SETRANGE', key, from, table.concat(out))
end
return u
