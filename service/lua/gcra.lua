-- gcra.lua: token bucket and leaky bucket (GCRA), preceded by `local LEAKY = <bool>` and
-- lib.lua. State: hash {i, f}, the theoretical arrival time TAT = i + f/Q µs, 0 <= f < Q.

local C = Q
if burst > 0 then C = burst end
local Ti, Tr = floor(W / Q), W % Q -- emission interval T = Ti + Tr/Q µs

local function add(ai, af, bi, bf)
  local i, f = ai + bi, af + bf
  if f >= Q then i, f = i + 1, f - Q end
  return i, f
end

local function sub(ai, af, bi, bf)
  local i, f = ai - bi, af - bf
  if f < 0 then i, f = i - 1, f + Q end
  return i, f
end

local function less(ai, af, bi, bf)
  return ai < bi or (ai == bi and af < bf)
end

local function ceil(i, f)
  if f > 0 then return i + 1 end
  return i
end

-- times returns c×T.
local function times(c)
  local q, r = muldivmod(c, Tr, Q)
  return c * Ti + q, r
end

local taui, tauf = times(C)
local ti, tf = now, 0
local st = redis.call('HMGET', key, 'i', 'f')
local si, sf = field(st[1], MAX_TIME + MAX_WINDOW), field(st[2], MAX_QUOTA - 1)
if si ~= nil and sf ~= nil then
  if sf >= Q then si, sf = si + 1, 0 end -- written under a larger quota: round up
  if not less(si, sf, now, 0) then ti, tf = si, sf end
end

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

redis.call('HSET', key, 'i', str(ti), 'f', str(tf))
redis.call('PEXPIRE', key, ttl)
return {allowed, remaining, reset, retry, delay}
