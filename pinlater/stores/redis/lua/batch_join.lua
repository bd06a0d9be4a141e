-- batch_join: jobs join a batch that is OPEN or SEALED (see
-- pinlater.stores.control.Batches). A job in another batch leaves it.
--
-- KEYS[1]  plc:batch:{id}         hash: doc, state, total, ok, failed, created, updated
-- KEYS[2]  plc:batch:{id}:jobs    hash: descriptor -> '' (not ended), 'S' or 'F'
-- KEYS[3]  plc:batchof            hash: descriptor -> batch id
-- KEYS[4]  plc:batches            zset: batch id -> ms last changed (every batch)
-- KEYS[5]  plc:batches:live       zset: the same, batches open, sealed or complete
-- ARGV[1]  the batch's id; ARGV[2..] descriptors
-- Returns: 1, or 0 (nothing joined) if the batch is in no state to.
local state = redis.call('HGET', KEYS[1], 'state')
if state ~= 'open' and state ~= 'sealed' then return 0 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local added = 0
for i = 2, #ARGV do
  local d = ARGV[i]
  local before = redis.call('HGET', KEYS[3], d)
  if before and before ~= ARGV[1] then
    local other = 'plc:batch:' .. before
    local outcome = redis.call('HGET', other .. ':jobs', d)
    if outcome then
      redis.call('HDEL', other .. ':jobs', d)
      redis.call('HINCRBY', other, 'total', -1)
      if outcome == 'S' then redis.call('HINCRBY', other, 'ok', -1) end
      if outcome == 'F' then redis.call('HINCRBY', other, 'failed', -1) end
    end
  end
  redis.call('HSET', KEYS[3], d, ARGV[1])
  added = added + redis.call('HSETNX', KEYS[2], d, '')
end
redis.call('HINCRBY', KEYS[1], 'total', added)
redis.call('HSET', KEYS[1], 'updated', now)
redis.call('ZADD', KEYS[4], now, ARGV[1])
redis.call('ZADD', KEYS[5], now, ARGV[1])
return 1
