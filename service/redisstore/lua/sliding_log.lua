-- sliding_log.lua, preceded by lib.lua and sliding_log_state.lua: a decision of the sliding log.

local eff = math.max(now, clock)
local cut = eff - W
local first = #ts + 1 -- the first live run: time > cut
for i = 1, #ts do
  if ts[i] > cut then
    first = i
    break
  end
end
local count = 0
for i = first, #ts do count = count + ns[i] end

local allowed, retry = 0, 0
if cost > Q then
  retry = NEVER
elseif cost <= Q - count then
  allowed = 1
else
  -- The oldest count+cost-Q live units must expire first; unit t expires at t+W.
  local j, acc = count + cost - Q, 0
  for i = first, #ts do
    acc = acc + ns[i]
    if acc >= j then
      retry = ts[i] + W - now
      break
    end
  end
end

local newest = nil
if allowed == 1 then
  count = count + cost
  newest = eff
elseif count > 0 then
  newest = ts[#ts]
end
local remaining = math.max(Q - count, 0)
local reset = 0
if newest ~= nil then reset = newest + W - now end
-- The effective window: with remaining spent now, one unit more is admitted once the oldest
-- live unit expires (with count above Q, written under a larger quota, once count-Q+1 have);
-- when every live unit is this request's, at eff + W.
local oldest, skip, acc = eff, math.max(count - Q, 0), 0
for i = first, #ts do
  acc = acc + ns[i]
  if acc > skip then
    oldest = ts[i]
    break
  end
end
local effective = oldest + W - now

-- Keep the live runs, at most the newest Q units of them, then the admitted units.
local out = {str(eff)}
local drop = 0
local live = 0
for i = first, #ts do live = live + ns[i] end
if live > Q then drop = live - Q end
for i = first, #ts do
  local n = ns[i]
  if drop > 0 then
    local d = math.min(drop, n)
    n, drop = n - d, drop - d
  end
  if n > 0 then
    out[#out + 1] = str(ts[i])
    out[#out + 1] = str(n)
  end
end
if allowed == 1 then
  if #out > 1 and out[#out - 1] == str(eff) then
    out[#out] = str(tonumber(out[#out]) + cost)
  else
    out[#out + 1] = str(eff)
    out[#out + 1] = str(cost)
  end
end

redis.call('SET', key, table.concat(out, ' '), 'PX', ttl)
return {allowed, remaining, reset, retry, 0, effective}
