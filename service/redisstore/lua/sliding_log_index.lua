-- sliding_log_index.lua, preceded by lib.lua: the sliding log's state as a decision reads it
-- (sliding_log.lua), in O(log n) interpreted steps for n runs.
--
-- Binary form, written by every decision: 'L', then struct '<dd' of clock (the latest now seen)
-- and base, then one '<dd' entry per run, ascending in time: the run's admission time and its
-- cumulative count c, the units of every run up to and including it plus base, modulo CUM. A run's
-- units are c(i) - c(i-1) (c(0) = base), so the units between two runs are one subtraction and the
-- run holding the j-th live unit a binary search: no decision walks the log. The text form of
-- sliding_log_state.lua ("clock t1 n1 t2 n2 ...", which the undo script writes) is read too,
-- converted once in O(n). Every entry read goes through touch (counted by the tests).
-- It sets clock, base, n (runs), the accessors at(i) -> t, c and, for the writer, entries(i, j),
-- the bytes of runs i..j.

local CUM = 4503599627370496 -- 2^52: counts are kept modulo it (a log holds at most 10^4 units)
local HEAD, SIZE = 17, 16
local function touch() end

local raw = redis.call('GET', key)
local clock, base, n = 0, 0, 0
local blob = ''

-- fromText converts a state of the text form into the binary form, or returns nil (unusable).
local function fromText(s)
  local vals = {}
  for v in string.gmatch(s, '%S+') do vals[#vals + 1] = v end
  if #vals % 2 ~= 1 then return nil end
  local c = field(vals[1], MAX_TIME)
  if c == nil then return nil end
  local parts, prev, cum = {'L', struct.pack('<dd', c, 0)}, 0, 0
  for i = 2, #vals - 1, 2 do
    touch()
    local t, u = field(vals[i], MAX_TIME), field(vals[i + 1], MAX_QUOTA)
    if t == nil or u == nil or u < 1 or t < prev or t > c then return nil end
    cum, prev = (cum + u) % CUM, t
    parts[#parts + 1] = struct.pack('<dd', t, cum)
  end
  return table.concat(parts)
end

if raw and string.sub(raw, 1, 1) ~= 'L' then raw = fromText(raw) end
if raw and #raw >= HEAD and (#raw - HEAD) % SIZE == 0 then
  local c, b = struct.unpack('<dd', raw, 2)
  if field(c, MAX_TIME) ~= nil and field(b, CUM - 1) ~= nil then
    clock, base, n, blob = c, b, (#raw - HEAD) / SIZE, raw
  end
end

-- at returns run i's time and cumulative count.
local function at(i)
  touch()
  return struct.unpack('<dd', blob, HEAD + (i - 1) * SIZE + 1)
end

-- An unusable binary state (not ours: only a decision writes this form) reads as a fresh one. Its
-- ends are checked: the first and the last run within the clock, in order.
if n > 0 then
  local t1 = at(1)
  local tn = at(n)
  if field(t1, MAX_TIME) == nil or field(tn, MAX_TIME) == nil or t1 > tn or tn > clock then
    clock, base, n, blob = 0, 0, 0, ''
  end
end

-- entries returns the bytes of runs i..j (empty when j < i).
local function entries(i, j)
  if j < i then return '' end
  return string.sub(blob, HEAD + (i - 1) * SIZE + 1, HEAD + j * SIZE)
end

-- search returns the first i in [lo, hi] for which pred(i) holds, or hi + 1; pred is false and
-- then true over the range.
local function search(lo, hi, pred)
  while lo <= hi do
    local mid = floor((lo + hi) / 2)
    if pred(mid) then hi = mid - 1 else lo = mid + 1 end
  end
  return lo
end
