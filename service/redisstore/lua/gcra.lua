-- gcra.lua: a decision of the token bucket or the leaky bucket, preceded by
-- `local LEAKY = <bool>`, lib.lua and gcra_state.lua.

local li, lf = add(now, 0, taui, tauf) -- the latest TAT that conforms
local allowed, retry, delay = 0, 0, 0
if cost > C then
  retry = NEVER
else
  local ci, cf = times(cost)
  local ni, nf = add(ti, tf, ci, cf)
  if not less(li, lf, ni, nf) then
    allowed = 1
    if LEAKY then delay = ceil(sub(ti, tf, now, 0)) end
    ti, tf = ni, nf
  else
    retry = ceil(sub(ni, nf, li, lf))
  end
end

local remaining = 0
if not less(li, lf, ti, tf) then
  local si2, sf2 = sub(li, lf, ti, tf)
  local q, r = muldivmod(si2, Q, W)
  remaining = q + floor((r + sf2) / W)
end
local reset = ceil(sub(ti, tf, now, 0))
-- The effective window: spending remaining moves the TAT by remaining×T, and one unit more
-- conforms once TAT + (remaining+1)×T <= now + tau.
local ri, rf = times(remaining + 1)
local ei, ef = add(ti, tf, ri, rf)
local effective = ceil(sub(ei, ef, li, lf))

redis.call('HSET', key, 'i', str(ti), 'f', str(tf))
redis.call('PEXPIRE', key, expiry(reset))
return {allowed, remaining, reset, retry, delay, effective, now} -- now: the time of the decision (algorithms.Decision.At), which an undo names
