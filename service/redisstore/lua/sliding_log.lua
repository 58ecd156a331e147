-- sliding_log.lua, preceded by lib.lua and sliding_log_index.lua: a decision of the sliding log.
-- It reads O(log d) runs for d runs expired or holding the units a search looks for (four
-- galloping searches from the first live run, and a few reads), in blocks of 32 runs, and writes
-- a run and the header: about ten commands whatever the log's length, and once per doubling of
-- the ring a copy of part of it.

local eff = math.max(now, clock)
local cut = eff - W
local function t(i) return (at(i)) end
local first = search(1, n, function(i) return t(i) > cut end) -- the first live run: time > cut
local cb = base -- the cumulative count before the first live run
if first > 1 then
  local _, c = at(first - 1)
  cb = c
end
-- units returns the live units up to and including run i.
local function units(i)
  local _, c = at(i)
  return (c - cb) % CUM
end
local count = 0
if first <= n then count = units(n) end
local live = count

local allowed, retry = 0, 0
if cost > Q then
  retry = NEVER
elseif cost <= Q - count then
  allowed = 1
else
  -- The oldest count+cost-Q live units must expire first; unit t expires at t+W.
  local j = count + cost - Q
  retry = t(search(first, n, function(i) return units(i) >= j end)) + W - now
end

local newest = nil
if allowed == 1 then
  count = count + cost
  newest = eff
elseif count > 0 then
  -- the newest run with units: an undo may have left the last runs with none
  local last = n
  if n > first and units(n - 1) == count then
    last = search(first, n, function(i) return units(i) >= count end)
  end
  newest = t(last)
end
local remaining = math.max(Q - count, 0)
local reset = 0
if newest ~= nil then reset = newest + W - now end
-- The effective window: with remaining spent now, one unit more is admitted once the oldest
-- live unit expires (with count above Q, written under a larger quota, once count-Q+1 have);
-- when every live unit is this request's, at eff + W.
local skip = math.max(count - Q, 0)
local oldest = eff
local o = search(first, n, function(i) return units(i) > skip end)
if o <= n then oldest = t(o) end
local effective = oldest + W - now

-- Keep the live runs, at most the newest Q units of them (the base moves past the dropped
-- units), then the admitted units.
local drop = math.max(live - Q, 0)
local keep = search(first, n, function(i) return units(i) > drop end)
local admitted = 0
if allowed == 1 then admitted = cost end
writeLog(eff, keep, (cb + drop) % CUM, admitted, Q)
return {allowed, remaining, reset, retry, 0, effective, now} -- now: the time of the decision (algorithms.Decision.At), which an undo names
