-- dequeue: PENDING with run_after <= now -> RUNNING under one new claim,
-- oldest run_after first, then lowest id (zset order: score, then member,
-- and members are zero-padded ids).
--
-- KEYS[1]  pl:{queue}:p{N}:pending
-- KEYS[2]  pl:{queue}:p{N}:running
-- KEYS[3]  pl:{queue}:p{N}:j:        job hash prefix (job keys derived from it)
-- ARGV[1]  limit (>= 1)
-- ARGV[2]  claim 'TOKEN@source' (TOKEN: 16 lowercase hex, new per call)
-- Returns: flat list id, body, attempts_allowed, attempts_remaining, ...
local limit = tonumber(ARGV[1])
if not limit or limit < 1 then return bad('dequeue: bad limit') end
local now = now_ms()
local members = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', int(now), 'LIMIT', 0, limit)
if #members == 0 then return {} end
-- They are exactly the first #members by rank.
redis.call('ZREMRANGEBYRANK', KEYS[1], 0, #members - 1)
local out = {}
local run = {}
for _, m in ipairs(members) do
  local k = job_key(KEYS[3], m)
  local f = redis.call('HMGET', k, 'body', 'attempts_allowed', 'attempts_remaining')
  -- A member without a hash cannot happen through these scripts; drop it
  -- rather than recreate a partial job.
  if f[1] then
    redis.call('HSET', k, 'state', 1, 'claim', ARGV[2], 'updated_at', int(now))
    run[#run + 1] = int(now)
    run[#run + 1] = m
    out[#out + 1] = tonumber(m)
    out[#out + 1] = f[1]
    out[#out + 1] = tonumber(f[2])
    out[#out + 1] = tonumber(f[3])
  end
end
zadd_many(KEYS[2], run)
return out
