-- fixed_window_settle.lua: a settle of the fixed window (algorithms.Limit.Adjust), preceded by
-- lib.lua and calendar.lua. ARGV[4] is the signed delta, ARGV[7] the reservation's age in µs,
-- ARGV[8] and ARGV[9] the calendar unit (0: none) and offset in µs. An over-run is
-- counted even past the quota, up to twice the quota (a debt of one quota below empty, whatever
-- was left); a refund applies only when the
-- reservation was decided in the current window (refunding into a later one would admit more
-- than the limit), never below 0. The state is written as Adjust writes it. Returns 1.

local delta = cost
local age = tonumber(ARGV[7]) or 0
local CAL, OFF = tonumber(ARGV[8]) or 0, tonumber(ARGV[9]) or 0
local s, k = now, 0
local st = redis.call('HMGET', key, 's', 'k')
local ss, sk = field(st[1], MAX_TIME), field(st[2], MAX_QUOTA)
if ss ~= nil and sk ~= nil then s, k = ss, sk end

local e
if CAL > 0 then
  s, e, k = calendar_position(CAL, OFF, s, k, now)
else
  s = s - s % W
  local cur = now - now % W
  if cur > s then s, k = cur, 0 end -- a later window (a clock step back stays in s)
  e = s + W
end

if delta > 0 then
  k = math.min(k + math.min(delta, 2 * Q), 2 * Q, MAX_QUOTA)
else
  local at = now - age
  if at < 0 then at = 0 end
  if s <= at and at < e then -- decided in this window
    k = math.max(k + math.max(delta, -Q), 0)
  end
end

redis.call('HSET', key, 's', str(s), 'k', str(k))
redis.call('PEXPIRE', key, ttl)
return 1
