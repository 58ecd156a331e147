-- permit_release.lua: give a concurrency permit back.
--   KEYS[1]  the key's permits (see permit_acquire.lua)
--   ARGV[1]  permit       the permit id
-- Releasing a permit that is not held (released already, or reclaimed) changes nothing.
-- Returns {released (0|1)}.

return {redis.call('ZREM', KEYS[1], ARGV[1])}
