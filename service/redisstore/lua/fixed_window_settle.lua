-- fixed_window_settle.lua: a settle of the fixed window (algorithms.Limit.Adjust), preceded by
-- lib.lua, calendar.lua and fixed_window_state.lua. ARGV[4] is the signed delta, ARGV[7] the
-- reservation's age in µs, ARGV[10] (when given) its time (taken_at.lua). An over-run is counted even past the quota, up to (MAX_DEBT+1)×Q (a
-- debt of MAX_DEBT quotas, carried into the windows after this one); a refund applies only when the
-- reservation was decided in the current window (refunding into a later one would admit more
-- than the limit), never below 0. The state is written as Adjust writes it, and kept while its
-- debt lasts. Returns the units applied (algorithms.Limit.Settle): for a refund the units the count
-- lost, for an over-run what it rose by.

local delta = cost
local given = 0

if delta > 0 then
  local ceiling = (MAX_DEBT + 1) * Q
  local was = k
  k = math.min(k + math.min(delta, ceiling), ceiling)
  given = math.max(k - was, 0)
else
  local at = taken_at()
  if at < 0 then at = 0 end
  if s <= at and at < e then -- decided in this window
    given = math.min(k, -delta, Q)
    k = k - given
  end
end

redis.call('HSET', key, 's', str(s), 'k', str(k))
redis.call('PEXPIRE', key, expiry(reset_us()))
return given
