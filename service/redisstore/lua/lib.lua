-- lib.lua: shared prelude of every meshlimit script (the service prepends it to each
-- algorithm's body). A transcription of package algorithms; see algorithms/doc.go for the
-- formulas and for why every value below stays an exact integer in Lua's doubles (< 2^53).
--
-- Calling convention, for every script:
--   KEYS[1]  the descriptor's state key (one key, so one hash slot)
--   ARGV[1]  quota        Q >= 1
--   ARGV[2]  window_us    W, in microseconds
--   ARGV[3]  burst        0 means quota (buckets only)
--   ARGV[4]  cost         c >= 1; for a settle script (*_settle.lua), the signed delta
--   ARGV[5]  ttl_ms       PEXPIRE of the state (Limit.TTL, rounded up)
--   ARGV[6]  now_us       optional; absent or empty means Redis TIME. Production never passes
--                         it: TIME makes every service replica agree. Tests and replays do.
--   ARGV[7]  age_us       settle scripts only: how long ago the reservation was decided (empty
--                         for a decision)
--   ARGV[8]  calendar     fixed-window scripts: the calendar unit, algorithms.CalendarUnit (0:
--                         none; with one, window_us is 0 and the window is the period)
--   ARGV[9]  offset_us    the calendar's UTC offset in µs (calendar.lua)
-- A decision returns {allowed (0|1), remaining, reset_us, retry_after_us (-1: never), delay_us,
-- effective_us, now_us} (effective_us: algorithms.Decision.EffectiveWindow, draft -11's effective
-- window; now_us: the instant it decided at, algorithms.Decision.At, which an undo names).
-- The service validates the arguments (algorithms.Limit.Validate) before calling.

local MAX_TIME = 4503599627370496     -- 2^52 µs, the latest representable now
local MAX_WINDOW = 34560000000000     -- 400 days in µs
local MAX_QUOTA = 1000000000000       -- 10^12
local NEVER = -1

local floor = math.floor

-- muldivmod returns floor(x*y/z), x*y mod z; exact for x, y, z < 2^45 (y < 2^49) and a
-- quotient < 2^53. When x*y < 2^52 the product is an exact double and one division, corrected
-- by at most one (the rounded quotient can only be one too high), is exact; otherwise it uses
-- long multiplication in base 128.
local function muldivmod(x, y, z)
  local p = x * y
  if p < 4503599627370496 then
    local q = floor(p / z)
    local r = p - q * z
    if r < 0 then
      q, r = q - 1, r + z
    elseif r >= z then
      q, r = q + 1, r - z
    end
    return q, r
  end
  local q, r = 0, 0
  for k = 6, 0, -1 do
    local d = floor(y / 128 ^ k) % 128
    local t = r * 128 + x * d
    local qt = floor(t / z)
    q, r = q * 128 + qt, t - qt * z
  end
  return q, r
end

-- field parses a stored integer in [0, hi], or returns nil (missing or unusable: start fresh).
local function field(s, hi)
  local n = tonumber(s)
  if n == nil or n < 0 or n > hi or n ~= floor(n) then
    return nil
  end
  return n
end

-- str formats an integer exactly. Redis would format a Lua number argument with %.14g,
-- which loses digits above 10^14 (every µs timestamp), so every number written goes through it.
local function str(n)
  return string.format('%.0f', n)
end

local key = KEYS[1]
local Q = tonumber(ARGV[1])
local W = tonumber(ARGV[2])
local burst = tonumber(ARGV[3])
local cost = tonumber(ARGV[4])
local ttl = ARGV[5]
local now
if ARGV[6] ~= nil and ARGV[6] ~= '' then
  now = tonumber(ARGV[6])
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
if now < 0 then
  now = 0
elseif now > MAX_TIME then
  now = MAX_TIME
end

-- expiry returns the PEXPIRE of a state that is fresh again reset µs from now: the TTL, or longer
-- while a settled over-run keeps the key in debt (forgetting the state would forgive the debt).
local function expiry(reset)
  local ms = floor((reset + 999) / 1000)
  if ms > tonumber(ttl) then return str(ms) end
  return ttl
end
