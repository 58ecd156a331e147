-- gcra_settle.lua: a settle of the token bucket or the leaky bucket (algorithms.Limit.Adjust),
-- preceded by `local LEAKY = <bool>`, lib.lua and gcra_state.lua. ARGV[4] is the signed delta.
-- An over-run is charged whole even when it does not fit, up to a debt of MAX_DEBT capacities below
-- empty whatever was left (the TAT at most now + (MAX_DEBT+1)τ, algorithms.MaxDebt); a refund never
-- makes the bucket fuller than full. The state is written as
-- Adjust writes it (a refund to a key without state writes a full bucket). Returns the units
-- applied (algorithms.Limit.Settle): for a refund, the span the TAT moved back by in units, rounded
-- up (-delta up to the capacity when the bucket lacked that much, 0 when it was full); for an
-- over-run the units charged (delta, or the span the TAT moved on by, rounded up, when the debt
-- stopped at its ceiling).

local MAX_DEBT = 64

-- times_tau returns k×τ for 0 <= k <= MAX_DEBT+1 (exact: k×τ.i < 2^52, k×τ.f < 2^47).
local function times_tau(k)
  local q, r = muldivmod(k, tauf, Q)
  return taui * k + q, r
end

-- ceil_units returns ceil(s/T) for a span s = si + sf/Q µs of at most (MAX_DEBT+1)τ, in whole
-- capacities k (times_tau, exact) and a rest below τ (muldivmod exact: its µs are < 2^45).
local function ceil_units(si, sf)
  local k = floor((si + sf / Q) / (taui + tauf / Q))
  if k > MAX_DEBT + 1 then k = MAX_DEBT + 1 end
  local ki, kf = times_tau(k)
  while k > 0 and less(si, sf, ki, kf) do k = k - 1; ki, kf = times_tau(k) end
  while k < MAX_DEBT + 1 do
    local ni, nf = times_tau(k + 1)
    if less(si, sf, ni, nf) then break end
    k, ki, kf = k + 1, ni, nf
  end
  local ri, rf = sub(si, sf, ki, kf)
  local q, r = muldivmod(ri, Q, W)
  r = r + rf
  q = q + floor(r / W)
  if r % W ~= 0 then q = q + 1 end
  return k * C + q
end

local delta = cost
local given = 0
if delta > 0 then
  local wi, wf = ti, tf
  local di, df = times_tau(MAX_DEBT + 1)
  local mi, mf = add(now, 0, di, df) -- the ceiling: a debt of MAX_DEBT capacities
  if less(MAX_TIME + MAX_WINDOW, 0, mi, mf) then mi, mf = MAX_TIME + MAX_WINDOW, 0 end
  local whole = floor(delta / C)
  local rest = delta - whole * C
  if rest < 0 then whole, rest = whole - 1, rest + C elseif rest >= C then whole, rest = whole + 1, rest - C end
  if whole > MAX_DEBT + 1 then -- past the ceiling from any TAT >= now
    ti, tf = mi, mf
  else
    local wi, wf = times_tau(whole)
    ti, tf = add(ti, tf, wi, wf)
    local ri, rf = times(rest)
    ti, tf = add(ti, tf, ri, rf)
  end
  local clamped = whole > MAX_DEBT + 1
  if less(mi, mf, ti, tf) then ti, tf, clamped = mi, mf, true end
  given = delta
  if clamped then -- the debt stopped at its ceiling: the units the TAT moved on by, rounded up
    given = 0
    if less(wi, wf, ti, tf) then given = ceil_units(sub(ti, tf, wi, wf)) end
  end
elseif delta < 0 then
  local b = math.min(-delta, C)
  local bi, bf = times(b)
  local wi, wf = ti, tf
  ti, tf = sub(ti, tf, bi, bf)
  if less(ti, tf, now, 0) then
    -- full again: the units it lacked, ceil((was - now)/T) < b (algorithms' refunded)
    ti, tf = now, 0
    given = ceil_units(sub(wi, wf, now, 0))
  else
    given = b
  end
end

redis.call('HSET', key, 'i', str(ti), 'f', str(tf))
redis.call('PEXPIRE', key, expiry(ceil(sub(ti, tf, now, 0))))
return given
