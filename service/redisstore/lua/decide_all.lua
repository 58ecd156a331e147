-- decide_all.lua: the decisions of one check's descriptors in one call, preceded by one function
-- per kind, decide[kind](KEYS, ARGV), each the kind's whole decision script (lib.lua's calling
-- convention) as a function of its own, so that every descriptor is decided by exactly the code
-- that decides it alone. KEYS[i] is the i-th descriptor's state key. ARGV[1] holds, for each in
-- turn, eight little-endian doubles: its algorithms.Kind, then quota, window_us, burst, cost,
-- now_us (-1: Redis TIME), calendar and offset_us (lib.lua's ARGV[1..4], ARGV[6], ARGV[8..9]);
-- ARGV[1+i] is its ttl_ms (ARGV[5]), a string that PEXPIRE takes as it is. Each script gets its
-- arguments as numbers, which every one of them reads through tonumber, and no age (ARGV[7]). The
-- descriptors are decided in order and the first denial ends the call: those after it are not
-- charged. Redis TIME is read once, for every descriptor without its own now_us: the check is
-- decided at one instant. Returns the decisions made, each as its script returns it.

local SLOT = 64
local nums = ARGV[1]
local out = {}
local batchNow = nil
for i = 1, #KEYS do
  local kind, q, w, b, c, t, unit, off = struct.unpack('<dddddddd', nums, (i - 1) * SLOT + 1)
  if t < 0 then
    if batchNow == nil then
      local tm = redis.call('TIME')
      batchNow = tonumber(tm[1]) * 1000000 + tonumber(tm[2])
    end
    t = batchNow
  end
  local d = decide[kind]({KEYS[i]}, {q, w, b, c, ARGV[1 + i], t, '', unit, off})
  out[i] = d
  if d[1] ~= 1 then break end
end
return out
