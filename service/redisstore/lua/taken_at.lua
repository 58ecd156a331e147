-- taken_at.lua, after lib.lua, before a settle or undo script: taken_at returns the time (µs) the
-- settled reservation or the given-back admission was decided at: ARGV[10] when the entry named it
-- (at_us, the store's time of that decision, carried back by the proxy), else now minus ARGV[7]
-- (age_us: an upper bound of its age, so this is never later than the decision). At least 0.
local function taken_at()
  local at = tonumber(ARGV[10] or '')
  if at == nil then
    at = now - (tonumber(ARGV[7]) or 0)
  end
  if at < 0 then return 0 end
  return at
end
