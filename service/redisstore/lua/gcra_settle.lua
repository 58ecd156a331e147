-- gcra_settle.lua: a settle of the token bucket or the leaky bucket (algorithms.Limit.Adjust),
-- preceded by `local LEAKY = <bool>`, lib.lua and gcra_state.lua. ARGV[4] is the signed delta.
-- An over-run is charged even when it does not fit, up to a debt of one capacity below empty
-- whatever was left (the TAT at most now + 2τ); a refund never makes the bucket fuller than full. The state is written as
-- Adjust writes it (a refund to a key without state writes a full bucket). Returns 1.

local delta = cost
if delta > 0 then
  local ci, cf = times(math.min(delta, 2 * C)) -- the ceiling below is the real bound
  ti, tf = add(ti, tf, ci, cf)
  local di, df = add(taui, tauf, taui, tauf)
  local mi, mf = add(now, 0, di, df) -- the ceiling: a debt of one capacity
  if less(MAX_TIME + MAX_WINDOW, 0, mi, mf) then mi, mf = MAX_TIME + MAX_WINDOW, 0 end
  if less(mi, mf, ti, tf) then ti, tf = mi, mf end
elseif delta < 0 then
  local bi, bf = times(math.min(-delta, C))
  ti, tf = sub(ti, tf, bi, bf)
  if less(ti, tf, now, 0) then ti, tf = now, 0 end
end

redis.call('HSET', key, 'i', str(ti), 'f', str(tf))
redis.call('PEXPIRE', key, expiry(ceil(sub(ti, tf, now, 0))))
return 1
