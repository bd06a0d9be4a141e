-- gc: delete jobs of a terminal state finished at least older_than ago,
-- oldest first; entries of the unique keys they took are swept
-- (drop_unique).
--
-- KEYS[1]  pl:{queue}:p{N}:succeeded or pl:{queue}:p{N}:failed
-- KEYS[2]  pl:{queue}:p{N}:jobs      jobs hash
-- ARGV[1]  older_than ms
-- ARGV[2]  limit (>= 1)
-- Returns: how many were deleted.
local older = tonumber(ARGV[1])
local limit = tonumber(ARGV[2])
if not older or not limit or limit < 1 then return bad('gc: bad arguments') end
local cutoff = int(now_ms() - older)
local members = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', cutoff, 'LIMIT', 0, limit)
if #members == 0 then return 0 end
redis.call('ZREMRANGEBYRANK', KEYS[1], 0, #members - 1)
hdel_many(KEYS[2], members)
drop_unique(KEYS[2], members)
return #members
