-- batch_state: a batch moved to a state if it is in one of the given ones.
--
-- KEYS[1]  plc:batch:{id}
-- KEYS[2]  plc:batches
-- KEYS[3]  plc:batches:live
-- KEYS[4]  plc:batches:done
-- ARGV[1]  the batch's id; ARGV[2] the new state; ARGV[3..] the states it may be in
-- Returns: 1 if moved, else 0.
local state = redis.call('HGET', KEYS[1], 'state')
local allowed = false
for i = 3, #ARGV do
  if state == ARGV[i] then allowed = true end
end
if not state or not allowed then return 0 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('HSET', KEYS[1], 'state', ARGV[2], 'updated', now)
redis.call('ZADD', KEYS[2], now, ARGV[1])
local to = ARGV[2]
if to == 'open' or to == 'sealed' or to == 'complete' then
  redis.call('ZADD', KEYS[3], now, ARGV[1])
  redis.call('ZREM', KEYS[4], ARGV[1])
else
  redis.call('ZREM', KEYS[3], ARGV[1])
  redis.call('ZADD', KEYS[4], now, ARGV[1])
end
return 1
