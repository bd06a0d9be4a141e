-- count: jobs in one state; PENDING split by the server's now.
--
-- KEYS[1]  pl:{queue}:p{N}:{state}    the state's zset
-- ARGV[1]  'all', 'due' (score <= now) or 'future' (score > now)
-- Returns: the count.
if ARGV[1] == 'all' then return redis.call('ZCARD', KEYS[1]) end
local now = int(now_ms())
if ARGV[1] == 'due' then return redis.call('ZCOUNT', KEYS[1], '-inf', now) end
if ARGV[1] == 'future' then return redis.call('ZCOUNT', KEYS[1], '(' .. now, '+inf') end
return bad('count: bad mode')
