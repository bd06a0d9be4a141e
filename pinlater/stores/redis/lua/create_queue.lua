-- create_queue: record the queue and its priorities 1..N (idempotent; the
-- per-priority zsets themselves appear with their first job), and lift a
-- deletion of it here, so that enqueues are stored again.
--
-- KEYS[1]  pl:queues
-- KEYS[2]  pl:{queue}:prios
-- KEYS[3]  pl:deleted
-- ARGV[1]  queue name
-- ARGV[2]  number of priorities N (>= 1)
-- Returns: 1
local n = tonumber(ARGV[2])
if not n or n < 1 then return bad('create_queue: bad priorities') end
for p = 1, n do redis.call('SADD', KEYS[2], p) end
redis.call('SADD', KEYS[1], ARGV[1])
redis.call('SREM', KEYS[3], ARGV[1])
return 1
