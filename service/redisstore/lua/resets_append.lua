-- resets_append.lua: append admin resets to the reset log (see service/resets.go).
--   KEYS[1]  the log's last position (a string integer)
--   KEYS[2]  the log: a sorted set, score = position, member = "<position>:<key>"
--   ARGV[1]  size         how many entries the log keeps
--   ARGV[2]  ...          the descriptor keys reset, in order
-- Position 1 is the origin of an empty log; the first entry is 2. The last position is taken
-- as the greater of KEYS[1] and the log's last score, so that losing KEYS[1] alone never reuses
-- a position. The log is trimmed to its size in the same call. Neither key expires: the log is
-- bounded by its size.
-- Returns the position of the last entry appended.

local seq = tonumber(redis.call('GET', KEYS[1]) or '0') or 0
local top = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
if top[2] and tonumber(top[2]) > seq then
  seq = tonumber(top[2])
end
if seq < 1 then
  seq = 1
end
for i = 2, #ARGV do
  seq = seq + 1
  local s = string.format('%d', seq)
  redis.call('ZADD', KEYS[2], s, s .. ':' .. ARGV[i])
end
redis.call('SET', KEYS[1], string.format('%d', seq))
redis.call('ZREMRANGEBYRANK', KEYS[2], 0, -(tonumber(ARGV[1]) + 1))
return seq
