-- slots_settle: the monitor's step on a capped queue's slots (see
-- pinlater/engine/slots.py): each owner not synced since `before` (a
-- process gone or leaving, or one never seen: jobs claimed before the cap
-- was set) now holds as many slots as it has jobs RUNNING, counted on the
-- shards. An owner synced since is left alone: it settles its own.
--
-- KEYS[1]  plc:held:{queue}          hash '#' -> total, OWNER -> held
-- KEYS[2]  plc:synced:{queue}        zset OWNER -> ms last synced
-- ARGV[1]  before (ms)
-- ARGV[2..] pairs: owner, jobs RUNNING
-- Returns: the slots freed (negative: added)
local before = tonumber(ARGV[1])
if not before or #ARGV % 2 ~= 1 then return redis.error_reply('pinlater: slots_settle: bad arguments') end
local total = tonumber(redis.call('HGET', KEYS[1], '#')) or 0
local freed = 0
for i = 2, #ARGV, 2 do
  local o, n = ARGV[i], tonumber(ARGV[i + 1])
  local at = tonumber(redis.call('ZSCORE', KEYS[2], o))
  if not n or n < 0 then return redis.error_reply('pinlater: slots_settle: bad count') end
  if not at or at < before then
    local held = tonumber(redis.call('HGET', KEYS[1], o)) or 0
    total = total + n - held
    freed = freed + held - n
    if n == 0 then
      redis.call('HDEL', KEYS[1], o)
      redis.call('ZREM', KEYS[2], o)
    else
      redis.call('HSET', KEYS[1], o, n)
      redis.call('ZADD', KEYS[2], 0, o)
    end
  end
end
redis.call('HSET', KEYS[1], '#', total)
return freed
