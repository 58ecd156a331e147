-- fixed_window.lua, preceded by lib.lua, calendar.lua and fixed_window_state.lua: a decision. A
-- count past Q is a debt: a request of cost c waits for the window in which the carried count leaves
-- room for it, the floor((k+c-1)/Q)-th after this one (the next when k is within Q).

local allowed, retry = 0, 0
if cost > Q then
  retry = NEVER
elseif cost <= Q - k then
  allowed = 1
  k = k + cost
else
  retry = after(quotas(k + cost - 1)) - now
end
local remaining = math.max(Q - k, 0)
local reset = reset_us()
local effective = after(quotas(math.max(k, Q))) - now -- once remaining is spent, one unit back

redis.call('HSET', key, 's', str(s), 'k', str(k))
redis.call('PEXPIRE', key, expiry(reset))
return {allowed, remaining, reset, retry, 0, effective, now} -- now: the time of the decision (algorithms.Decision.At), which an undo names
