-- batch_seal: OPEN -> SEALED, and COMPLETE at once if every job has ended.
--
-- KEYS[1]  plc:batch:{id}
-- KEYS[2]  plc:batches
-- KEYS[3]  plc:batches:live
-- ARGV[1]  the batch's id
-- Returns: 1 if this made it COMPLETE, 0 if SEALED, -1 if it was not OPEN.
if redis.call('HGET', KEYS[1], 'state') ~= 'open' then return -1 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local c = redis.call('HMGET', KEYS[1], 'total', 'ok', 'failed')
local complete = tonumber(c[2] or 0) + tonumber(c[3] or 0) >= tonumber(c[1] or 0)
redis.call('HSET', KEYS[1], 'state', complete and 'complete' or 'sealed', 'updated', now)
redis.call('ZADD', KEYS[2], now, ARGV[1])
redis.call('ZADD', KEYS[3], now, ARGV[1])
return complete and 1 or 0
