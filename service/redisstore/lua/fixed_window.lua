-- fixed_window.lua, preceded by lib.lua and calendar.lua. State: hash {s, k}, the window start
-- (µs, a multiple of W, or a calendar period's start) and the cost counted in it. ARGV[8] is the
-- calendar unit (0: none, W is the window) and ARGV[9] its UTC offset in µs.

local CAL, OFF = tonumber(ARGV[8]) or 0, tonumber(ARGV[9]) or 0

local s, k = now, 0
local st = redis.call('HMGET', key, 's', 'k')
local ss, sk = field(st[1], MAX_TIME), field(st[2], MAX_QUOTA)
if ss ~= nil and sk ~= nil then s, k = ss, sk end

local e
if CAL > 0 then
  s, e, k = calendar_position(CAL, OFF, s, k, now)
else
  s = s - s % W -- realign: the window may have changed
  local cur = now - now % W
  if cur > s then s, k = cur, 0 end -- a later window (a clock step back stays in s)
  e = s + W
end

local allowed, retry = 0, 0
if cost > Q then
  retry = NEVER
elseif cost <= Q - k then
  allowed = 1
  k = k + cost
else
  retry = e - now
end
local remaining = math.max(Q - k, 0)
local reset = 0
if k > 0 then reset = e - now end

redis.call('HSET', key, 's', str(s), 'k', str(k))
redis.call('PEXPIRE', key, ttl)
return {allowed, remaining, reset, retry, 0, e - now} -- every unit is back at the window's end
