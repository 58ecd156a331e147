-- calendar.lua: the calendar windows of package algorithms in Lua 5.1 (Redis scripts), a
-- transcription, operation for operation, of Calendar.periodUs and its civil-date helpers
-- (algorithms/calendar.go) of Limit.placeFixed for a calendar limit (algorithms/window.go) and of Calendar.indexUs and startUs.
-- algorithms/doc.go ("Calendar windows") gives the formulas and why every value is exact.
--
-- Contract (the caller validates, as algorithms.Limit.Validate does):
--   unit    1 day, 2 ISO week (Monday 00:00), 3 month, 4 year: algorithms.CalendarUnit
--   o       the fixed UTC offset in µs, east positive: a whole number of minutes, |o| <= 18 h
--           (64800000000)
--   n, s    µs since the unix epoch, integers in [0, 2^52] (n is lib.lua's clamped now; s a
--           stored window start, as field(…, MAX_TIME) reads it)
--
-- calendar_period(unit, o, n) returns start, end: the period that contains n, [start, end) in
-- µs. end - start is the period's real length (24 h, 7 d, 28 to 31 d, 365 or 366 d). start is
-- negative only for the period that contains the epoch, when it began before it.
--
-- calendar_position(unit, o, s, n) places a stored window start s (s = n when the key is new) at
-- now n and returns start, end, m: the period to decide in (start >= 0, the value to store as s),
-- its end, and the number of periods from s's to it (0 when it is s's, or the clock stepped back),
-- by which the fixed-window scripts pay the count's debt (algorithms.Limit.placeFixed).
--
-- calendar_index(unit, o, n) returns the number of the period that contains n (n <= 2^52 and 65
-- periods), consecutive periods having consecutive numbers, and calendar_start(unit, o, i) the
-- start of period number i (Calendar.indexUs and Calendar.startUs): a window in debt waits for
-- calendar_start(unit, o, calendar_index(unit, o, s) + j), the j-th period after s's.
--
-- Every value is an integer below 2^53 in magnitude, so doubles hold it exactly; every division
-- is floored and exact (see doc.go). TestCalendarLuaInDoubles runs this text's transcription in
-- float64, TestCalendarLuaOnRedis runs this file on a real redis-server, both against Go.

local floor = math.floor
local DAY_US = 86400000000

-- days_from_civil returns the days since 1970-01-01 of the Gregorian date y-m-d.
local function days_from_civil(y, m, d)
  if m <= 2 then y = y - 1 end
  local era = floor(y / 400)
  local yoe = y - era * 400
  local mp = (m + 9) % 12
  local doy = floor((153 * mp + 2) / 5) + d - 1
  local doe = yoe * 365 + floor(yoe / 4) - floor(yoe / 100) + doy
  return era * 146097 + doe - 719468
end

-- civil_from_days returns the Gregorian date y, m, d of z days since 1970-01-01.
local function civil_from_days(z)
  z = z + 719468
  local era = floor(z / 146097)
  local doe = z - era * 146097
  local yoe = floor((doe - floor(doe / 1460) + floor(doe / 36524) - floor(doe / 146096)) / 365)
  local doy = doe - (365 * yoe + floor(yoe / 4) - floor(yoe / 100))
  local mp = floor((5 * doy + 2) / 153)
  local d = doy - floor((153 * mp + 2) / 5) + 1
  local m = (mp + 2) % 12 + 1
  local y = yoe + era * 400
  if m <= 2 then y = y + 1 end
  return y, m, d
end

local function leap(y)
  if y % 4 == 0 and (y % 100 ~= 0 or y % 400 == 0) then return 1 end
  return 0
end

local function days_in_month(y, m)
  if m == 2 then return 28 + leap(y) end
  return 30 + (m + floor(m / 8)) % 2
end

local function calendar_period(unit, o, n)
  local day = floor((n + o) / DAY_US)
  local first, nxt
  if unit == 1 then
    first, nxt = day, day + 1
  elseif unit == 2 then
    first = day - (day + 3) % 7
    nxt = first + 7
  elseif unit == 3 then
    local y, m, d = civil_from_days(day)
    first = day - (d - 1)
    nxt = first + days_in_month(y, m)
  else
    local y = civil_from_days(day)
    first = days_from_civil(y, 1, 1)
    nxt = first + 365 + leap(y)
  end
  return first * DAY_US - o, nxt * DAY_US - o
end

local function calendar_index(unit, o, n)
  local day = floor((n + o) / DAY_US)
  if unit == 1 then return day end
  if unit == 2 then return floor((day + 3) / 7) end
  local y, m = civil_from_days(day)
  if unit == 3 then return y * 12 + m - 1 end
  return y
end

local function calendar_start(unit, o, i)
  local first
  if unit == 1 then
    first = i
  elseif unit == 2 then
    first = i * 7 - 3
  elseif unit == 3 then
    first = days_from_civil(floor(i / 12), i % 12 + 1, 1)
  else
    first = days_from_civil(i, 1, 1)
  end
  return first * DAY_US - o
end

local function calendar_position(unit, o, s, n)
  local cs, ce = calendar_period(unit, o, n)
  if cs < 0 then cs = 0 end
  if s < cs then return cs, ce, calendar_index(unit, o, n) - calendar_index(unit, o, s) end
  if s < ce then return cs, ce, 0 end
  local ps, pe = calendar_period(unit, o, s)
  return ps, pe, 0
end
