-- expire_claims: RUNNING jobs whose last claim/heartbeat is at least
-- timeout old, handled as a failure ACK with no delay: PENDING with
-- attempts_remaining - 1 and run_after = now, or FAILED at the last
-- attempt. Claim cleared. Oldest heartbeat first.
--
-- KEYS[1]  pl:{queue}:p{N}:running
-- KEYS[2]  pl:{queue}:p{N}:pending
-- KEYS[3]  pl:{queue}:p{N}:failed
-- KEYS[4]  pl:{queue}:p{N}:j:        job hash prefix (job keys derived from it)
-- ARGV[1]  claim timeout ms
-- ARGV[2]  limit (>= 1)
-- Returns: {repended, failed}
local timeout = tonumber(ARGV[1])
local limit = tonumber(ARGV[2])
if not timeout or not limit or limit < 1 then return bad('expire_claims: bad arguments') end
local nowi = now_ms()
local now = int(nowi)
local members = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', int(nowi - timeout), 'LIMIT', 0, limit)
local repended, failed = 0, 0
for _, m in ipairs(members) do
  redis.call('ZREM', KEYS[1], m)
  local k = job_key(KEYS[4], m)
  local f = redis.call('HMGET', k, 'state', 'attempts_remaining')
  local left = tonumber(f[2])
  if f[1] == '1' and left then
    if left > 1 then
      redis.call('HSET', k, 'state', 0, 'attempts_remaining', int(left - 1),
        'run_after', now, 'updated_at', now, 'claim', '')
      redis.call('ZADD', KEYS[2], now, m)
      repended = repended + 1
    else
      redis.call('HSET', k, 'state', 3, 'attempts_remaining', 0, 'updated_at', now, 'claim', '')
      redis.call('ZADD', KEYS[3], now, m)
      failed = failed + 1
    end
  end
end
return {repended, failed}
