-- sliding_log_state.lua, preceded by lib.lua: reads the whole sliding log's state, in O(n) for n
-- runs, for sliding_log_undo.lua (a decision reads it in O(log n): sliding_log_index.lua). State:
-- a string "clock t1 n1 t2 n2 ...": the latest now seen and, ascending, each admission time with
-- its number of cost units (a run-length form of the algorithms package's one entry per unit; at
-- most Q units are kept), or the ring form a decision writes (sliding_log_index.lua), decoded to
-- the same. It sets clock, ts and ns, and raw (nil: no key); an unusable state reads as a fresh
-- one (clock 0, no runs).


local clock = 0
local ts, ns = {}, {}
local raw = redis.call('GET', key)
-- ringText returns the text form of a state of the ring form (sliding_log_index.lua), or ''
-- (unusable).
local function ringText(s)
  if #s < 41 then return '' end
  local c, prev, start, count, cap = struct.unpack('<ddddd', s, 2)
  if #s ~= 41 + 16 * cap or count > cap or count > 0 and start >= cap then return '' end
  local vals = {str(c)}
  for i = 0, count - 1 do
    local t, cum = struct.unpack('<dd', s, 42 + 16 * ((start + i) % cap))
    vals[#vals + 1], vals[#vals + 2] = str(t), str((cum - prev) % 4503599627370496)
    prev = cum
  end
  return table.concat(vals, ' ')
end
if raw then
  local vals = {}
  local text = raw
  if string.sub(raw, 1, 1) == 'R' then text = ringText(raw) end
  for v in string.gmatch(text, '%S+') do vals[#vals + 1] = v end
  local ok = #vals % 2 == 1
  local c = ok and field(vals[1], MAX_TIME)
  if c == nil then ok = false end
  local prev = 0
  local i = 2
  while ok and i < #vals do
    local t, n = field(vals[i], MAX_TIME), field(vals[i + 1], MAX_QUOTA)
    if t == nil or n == nil or n < 1 or t < prev or t > c then
      ok = false
    else
      ts[#ts + 1], ns[#ns + 1], prev = t, n, t
    end
    i = i + 2
  end
  if ok then
    clock = c
  else
    ts, ns = {}, {} -- unusable: start fresh
  end
end

