-- sliding_window_undo.lua, preceded by lib.lua: gives back an admission of the sliding window
-- counter (algorithms.Limit.Undo). ARGV[4] is the signed delta (< 0: -delta units were admitted),
-- ARGV[7] how long ago in µs, or ARGV[10] when (taken_at.lua). The windows roll as a decision rolls them, then the count of the
-- window that holds the admission's time (the current or the previous one) drops by the units,
-- never below 0: the estimate is what it would be had the request not come. A key without state
-- is left alone; the TTL is kept. Returns the units the count lost (algorithms.Limit.GiveBack).

local st = redis.call('HMGET', key, 's', 'p', 'k')
local s, p, k = field(st[1], MAX_TIME), field(st[2], MAX_QUOTA), field(st[3], MAX_QUOTA)
if s == nil or p == nil or k == nil then
  return 0 -- no state (or an unusable one, which a decision reads as fresh): nothing to give back
end
local undo = -cost
local at = taken_at()

s = s - s % W
local cur = now - now % W
if cur <= s then
  -- a clock step back stays in the stored window
elseif cur - s == W then
  s, p, k = cur, k, 0
else
  s, p, k = cur, 0, 0
end
local given = 0
if s <= at and at < s + W then
  given = math.min(k, undo)
  k = k - given
elseif s - W <= at and at < s then
  given = math.min(p, undo)
  p = p - given
end

redis.call('HSET', key, 's', str(s), 'p', str(p), 'k', str(k))
return given
