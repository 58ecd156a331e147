-- sliding_log_undo.lua, preceded by lib.lua and sliding_log_state.lua: gives back an admission of
-- the sliding log (algorithms.Limit.Undo). ARGV[4] is the signed delta (< 0: -delta units were
-- admitted), ARGV[7] how long ago in µs, or ARGV[10] when (taken_at.lua). It drops the -delta oldest units at or after the
-- admission's time, which are its own (a decision stamps its units with the latest now seen, and
-- no earlier unit is later) or, when others came at the same instant, units equal to them; an
-- admission that has left the window has nothing left to give back. The clock is kept and the
-- state written with its TTL kept; a key without state is left alone. Returns 1.

local undo = -cost
local at = taken_at()
if raw == nil or #ts == 0 or at <= math.max(now, clock) - W then
  return 1
end
local out = {str(clock)}
local dropped = 0
for i = 1, #ts do
  local n = ns[i]
  if ts[i] >= at and dropped < undo then
    local d = math.min(undo - dropped, n)
    n, dropped = n - d, dropped + d
  end
  if n > 0 then
    out[#out + 1] = str(ts[i])
    out[#out + 1] = str(n)
  end
end
if dropped > 0 then
  redis.call('SET', key, table.concat(out, ' '), 'KEEPTTL')
end
return 1
