-- permit_acquire.lua: acquire a concurrency permit (one in-flight request) of a key.
--   KEYS[1]  the key's permits: a sorted set, member = permit id, score = lease end (unix µs)
--   ARGV[1]  limit        permits held at once, >= 1
--   ARGV[2]  permit       the permit id
--   ARGV[3]  lease_us     the lease, in µs
--   ARGV[4]  now_us       optional; absent or empty means Redis TIME (as in lib.lua)
-- Expired permits are removed first (reclaimed: their holder neither renewed nor released
-- them). A permit already held (a retried acquire) is admitted again with a new lease and
-- counted once. The set expires with its last lease.
-- Returns {allowed (0|1), held (permits held afterwards), reclaimed}.

local key, limit, permit, lease = KEYS[1], tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3])
local now
if ARGV[4] ~= nil and ARGV[4] ~= '' then
  now = tonumber(ARGV[4])
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end

local reclaimed = redis.call('ZREMRANGEBYSCORE', key, '-inf', string.format('%.0f', now))
local held = redis.call('ZCARD', key)
local allowed = 0
if redis.call('ZSCORE', key, permit) then
  allowed = 1
elseif held < limit then
  allowed, held = 1, held + 1
end
if allowed == 1 then
  redis.call('ZADD', key, string.format('%.0f', now + lease), permit)
end
local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
if last[2] then
  redis.call('PEXPIRE', key, string.format('%.0f', math.floor((tonumber(last[2]) - now) / 1000) + 1))
end
return {allowed, held, reclaimed}
