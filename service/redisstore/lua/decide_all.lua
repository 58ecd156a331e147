-- decide_all.lua: the decisions of one check's descriptors in one call, preceded by one function
-- per kind, decide[kind](KEYS, ARGV), each the kind's whole decision script (lib.lua's calling
-- convention) as a function of its own, so that every descriptor is decided by exactly the code
-- that decides it alone. KEYS[i] is the i-th descriptor's state key; ARGV holds, for each in
-- turn, its algorithms.Kind and the nine arguments of its script (ARGV[1..9] of lib.lua). The
-- descriptors are decided in order and the first denial ends the call: those after it are not
-- charged. Redis TIME is read once, for every descriptor without its own now_us: the check is
-- decided at one instant. Returns the decisions made, each as its script returns it.

local STRIDE = 10
local out = {}
local batchNow = nil
for i = 1, #KEYS do
  local a = (i - 1) * STRIDE + 1
  local argv = {unpack(ARGV, a + 1, a + STRIDE - 1)}
  if argv[6] == '' then
    if batchNow == nil then
      local t = redis.call('TIME')
      batchNow = string.format('%.0f', tonumber(t[1]) * 1000000 + tonumber(t[2]))
    end
    argv[6] = batchNow
  end
  local d = decide[tonumber(ARGV[a])]({KEYS[i]}, argv)
  out[i] = d
  if d[1] ~= 1 then break end
end
return out
