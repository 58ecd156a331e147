-- decide_all.lua: the decisions of one check's descriptors in one call, preceded by one function
-- per kind, decide[kind](KEYS, ARGV), each the kind's whole decision script (lib.lua's calling
-- convention) as a function of its own, so that every descriptor is decided by exactly the code
-- that decides it alone. KEYS[i] is the i-th descriptor's state key; ARGV holds, for each in
-- turn, its algorithms.Kind and the nine arguments of its script (ARGV[1..9] of lib.lua). The
-- descriptors are decided in order and the first denial ends the call: those after it are not
-- charged. Returns the decisions made, each as its script returns it.

local STRIDE = 10
local out = {}
for i = 1, #KEYS do
  local a = (i - 1) * STRIDE + 1
  local d = decide[tonumber(ARGV[a])]({KEYS[i]}, {unpack(ARGV, a + 1, a + STRIDE - 1)})
  out[i] = d
  if d[1] ~= 1 then break end
end
return out
