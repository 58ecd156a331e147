-- fixed_window_state.lua: the state of the fixed window, preceded by lib.lua and calendar.lua and
-- followed by fixed_window.lua (a decision) or fixed_window_settle.lua (a settle). State: hash
-- {s, k}, the window start (µs, a multiple of W, or a calendar period's start) and the cost counted
-- in it, which a settled over-run may take up to (MAX_DEBT+1)×Q: what passed Q is carried into the
-- windows after it, a quota paid per window (algorithms.Limit.positionFixed). ARGV[8] is the
-- calendar unit (0: none, W is the window) and ARGV[9] its UTC offset in µs.

local MAX_DEBT = 64 -- algorithms.MaxDebt
local CAL, OFF = tonumber(ARGV[8]) or 0, tonumber(ARGV[9]) or 0

local s, k = now, 0
local st = redis.call('HMGET', key, 's', 'k')
local ss, sk = field(st[1], MAX_TIME), field(st[2], (MAX_DEBT + 1) * MAX_QUOTA)
if ss ~= nil and sk ~= nil then s, k = ss, sk end
k = math.min(k, (MAX_DEBT + 1) * Q)

local e, m
if CAL > 0 then
  s, e, m = calendar_position(CAL, OFF, s, now)
else
  s = s - s % W -- realign: the window may have changed
  local cur = now - now % W
  m = 0
  if cur > s then s, m = cur, (cur - s) / W end -- a later window (a clock step back stays in s)
  e = s + W
end
if m > 0 then k = math.max(k - math.min(m, MAX_DEBT + 1) * Q, 0) end

-- after returns the start of the j-th window after s's (1 <= j <= MAX_DEBT+1).
local function after(j)
  if CAL > 0 then return calendar_start(CAL, OFF, calendar_index(CAL, OFF, s) + j) end
  return s + j * W
end

-- quotas returns floor(x / Q), exactly, for 0 <= x < 2^52.
local function quotas(x)
  local q = muldivmod(x, 1, Q)
  return q
end

-- reset_us returns the time until the count is 0 again: ceil(k / Q) windows on.
local function reset_us()
  if k > 0 then return after(quotas(k + Q - 1)) - now end
  return 0
end
