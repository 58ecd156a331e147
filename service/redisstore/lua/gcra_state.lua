-- gcra_state.lua: the arithmetic and the state of the token and leaky buckets (GCRA), preceded
-- by lib.lua and followed by gcra.lua (a decision) or gcra_settle.lua (a settle). State: hash
-- {i, f}, the theoretical arrival time TAT = i + f/Q µs, 0 <= f < Q.

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

