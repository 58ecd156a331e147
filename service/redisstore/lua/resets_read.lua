-- resets_read.lua: read the reset log (see resets_append.lua for its keys).
--   ARGV[1]  since   the entries after this position
--   ARGV[2]  prefix  only the entries whose key starts with it
--   ARGV[3]  max     at most this many entries (0: none, only the bounds)
-- Returns {latest, oldest, more (0|1), seq1, key1, seq2, key2, ...}: the last position (1 for
-- a log never written to), the position of the oldest entry held (latest + 1 when none), and
-- the matching entries in ascending order. It writes nothing.

local seq = tonumber(redis.call('GET', KEYS[1]) or '0') or 0
local top = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
if top[2] and tonumber(top[2]) > seq then
  seq = tonumber(top[2])
end
if seq < 1 then
  seq = 1
end
local first = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
local oldest = seq + 1
if first[2] then
  oldest = tonumber(first[2])
end
local out = {seq, oldest, 0}
local max = tonumber(ARGV[3])
if max > 0 then
  local prefix = ARGV[2]
  local n = 0
  for _, m in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], '(' .. ARGV[1], '+inf')) do
    local colon = string.find(m, ':', 1, true)
    local key = string.sub(m, colon + 1)
    if string.sub(key, 1, #prefix) == prefix then
      if n == max then
        out[3] = 1
        break
      end
      n = n + 1
      out[#out + 1] = tonumber(string.sub(m, 1, colon - 1))
      out[#out + 1] = key
    end
  end
end
return out
