-- sliding_window.lua, preceded by lib.lua. Cloudflare's two-counter estimate in exact
-- integers. State: hash {s, p, k}, the current window start (µs, a multiple of W), the
-- previous window's count and the current window's count.

local s, p, k = now, 0, 0
local st = redis.call('HMGET', key, 's', 'p', 'k')
local ss, sp, sk = field(st[1], MAX_TIME), field(st[2], MAX_QUOTA), field(st[3], MAX_QUOTA)
if ss ~= nil and sp ~= nil and sk ~= nil then s, p, k = ss, sp, sk end

s = s - s % W
local cur = now - now % W
local eff = now
if cur <= s then
  eff = math.max(now, s) -- a clock step back stays in the stored window
elseif cur - s == W then
  s, p, k = cur, k, 0
else
  s, p, k = cur, 0, 0
end

local wq, wr = muldivmod(p, W - (eff - s), W)
local weighted = wq
if wr > 0 then weighted = weighted + 1 end
local avail = Q - k - weighted

-- retry_at returns the earliest time (µs) at which a cost c <= Q is admitted, with kk counted
-- in the window starting at s (and p in the previous one), if nothing else arrives.
local function retry_at(kk, c)
  local a = Q - kk - c
  if a >= 0 then
    return s + W - muldivmod(a, W, p) -- later in this window
  elseif Q - c >= kk then
    return s + W
  end
  return s + 2 * W - muldivmod(Q - c, W, kk) -- in the next window
end

local allowed, retry = 0, 0
if cost > Q then
  retry = NEVER
elseif cost <= avail then
  allowed = 1
  k = k + cost
  avail = avail - cost
else
  retry = retry_at(k, cost) - now
end
local remaining = math.max(avail, 0)
local reset = 0
if k > 0 then
  reset = s + 2 * W - now
elseif p > 0 then
  reset = s + W - now
end

-- The effective window: when a unit is admitted once remaining more are counted in this window.
local effective = retry_at(k + remaining, 1) - now

redis.call('HSET', key, 's', str(s), 'p', str(p), 'k', str(k))
redis.call('PEXPIRE', key, ttl)
return {allowed, remaining, reset, retry, 0, effective, now} -- now: the time of the decision (algorithms.Decision.At), which an undo names
