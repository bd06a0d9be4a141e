-- key_slots_settle: the monitor's step on a queue's per-key slots (see
-- pinlater/engine/key_slots.py): each (owner, key) given whose owner has
-- not synced since `before` (a process gone or leaving, or one never seen:
-- jobs claimed before the limit was set) now holds as many slots as it
-- has jobs of that key RUNNING, counted on the shards. An owner synced
-- since is left alone: it settles its own. A settled owner left holding
-- nothing is forgotten.
--
-- KEYS[1]  plc:kheld:{queue}    as key_slots_sync
-- KEYS[2]  plc:ksynced:{queue}  zset OWNER -> ms last synced
-- ARGV[1]  before (ms)
-- ARGV[2..] triples: owner, key, jobs RUNNING
-- Returns: the slots freed (negative: added)
local before = tonumber(ARGV[1])
if not before or (#ARGV - 1) % 3 ~= 0 then return redis.error_reply('pinlater: key_slots_settle: bad arguments') end
local function get(field) return tonumber(redis.call('HGET', KEYS[1], field)) or 0 end
local function add(field, d)
  local v = get(field) + d
  if v > 0 then redis.call('HSET', KEYS[1], field, v) else redis.call('HDEL', KEYS[1], field) end
end
local freed, settled = 0, {}
for i = 2, #ARGV, 3 do
  local o, k, n = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2])
  if not n or n < 0 or o == '#' then return redis.error_reply('pinlater: key_slots_settle: bad count') end
  local at = tonumber(redis.call('ZSCORE', KEYS[2], o))
  if not at or at < before then
    local d = n - get(o .. '\0' .. k)
    if d ~= 0 then
      add(o .. '\0' .. k, d)
      add('#\0' .. k, d)
      add(o .. '\0', d)
      freed = freed - d
    end
    settled[#settled + 1] = o
  end
end
for _, o in ipairs(settled) do
  if get(o .. '\0') > 0 then
    redis.call('ZADD', KEYS[2], 0, o)
  else
    redis.call('ZREM', KEYS[2], o)
  end
end
return freed
