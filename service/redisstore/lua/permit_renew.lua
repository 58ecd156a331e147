-- permit_renew.lua: extend the lease of a held concurrency permit.
--   KEYS[1]  the key's permits (see permit_acquire.lua)
--   ARGV[1]  permit       the permit id
--   ARGV[2]  lease_us     the new lease, in µs from now
--   ARGV[3]  now_us       optional; absent or empty means Redis TIME
-- A permit whose lease has ended is not renewed: it was reclaimed, and its slot may be
-- another request's already (the holder counts it as lost).
-- Returns {renewed (0|1), reclaimed}.

local key, permit, lease = KEYS[1], ARGV[1], tonumber(ARGV[2])
local now
if ARGV[3] ~= nil and ARGV[3] ~= '' then
  now = tonumber(ARGV[3])
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end

local reclaimed = redis.call('ZREMRANGEBYSCORE', key, '-inf', string.format('%.0f', now))
if not redis.call('ZSCORE', key, permit) then
  return {0, reclaimed}
end
redis.call('ZADD', key, 'XX', string.format('%.0f', now + lease), permit)
local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
redis.call('PEXPIRE', key, string.format('%.0f', math.floor((tonumber(last[2]) - now) / 1000) + 1))
return {1, reclaimed}
