-- retry_failed: FAILED -> PENDING for the most recently failed jobs:
-- attempts_allowed = attempts_remaining = attempts, run_after = given or
-- now, updated_at = now, claim cleared.
--
-- KEYS[1]  pl:{queue}:p{N}:failed
-- KEYS[2]  pl:{queue}:p{N}:pending
-- KEYS[3]  pl:{queue}:p{N}:j:        job hash prefix (job keys derived from it)
-- ARGV[1]  attempts (>= 1)
-- ARGV[2]  run_after ms ('' = now)
-- ARGV[3]  limit (>= 1)
-- Returns: how many were moved.
local attempts = tonumber(ARGV[1])
local limit = tonumber(ARGV[3])
if not attempts or attempts < 1 then return bad('retry_failed: bad attempts') end
if ARGV[2] ~= '' and not tonumber(ARGV[2]) then return bad('retry_failed: bad run_after') end
if not limit or limit < 1 then return bad('retry_failed: bad limit') end
local now = int(now_ms())
local run_after = ARGV[2]
if run_after == '' then run_after = now end
local members = redis.call('ZREVRANGE', KEYS[1], 0, limit - 1)
local moved = 0
for _, m in ipairs(members) do
  redis.call('ZREM', KEYS[1], m)
  local k = job_key(KEYS[3], m)
  if redis.call('HGET', k, 'state') == '3' then
    redis.call('HSET', k, 'state', 0, 'attempts_allowed', ARGV[1], 'attempts_remaining', ARGV[1],
      'run_after', run_after, 'updated_at', now, 'claim', '')
    redis.call('ZADD', KEYS[2], run_after, m)
    moved = moved + 1
  end
end
return moved
