-- expire_claims: RUNNING jobs whose last claim/heartbeat is at least
-- timeout old, handled as a failure ACK with no delay: PENDING with
-- attempts_remaining - 1 and run_after = now, or FAILED at the last
-- attempt. Claim cleared. Oldest heartbeat first.
--
-- KEYS[1]  pl:{queue}:p{N}:running
-- KEYS[2]  pl:{queue}:p{N}:pending
-- KEYS[3]  pl:{queue}:p{N}:failed
-- KEYS[4]  pl:{queue}:p{N}:jobs       jobs hash
-- ARGV[1]  claim timeout ms
-- ARGV[2]  limit (>= 1)
-- Returns: {repended, failed}
local timeout = tonumber(ARGV[1])
local limit = tonumber(ARGV[2])
if not timeout or not limit or limit < 1 then return bad('expire_claims: bad arguments') end
local now = now_ms()
local score = int(now)
local members = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', int(now - timeout), 'LIMIT', 0, limit)
if #members == 0 then return {0, 0} end
zrem_many(KEYS[1], members)
unindex(KEYS[1], members)
local values = hmget_many(KEYS[4], members)
local repended, failed = 0, 0
local rows, back = {}, {}
for i, m in ipairs(members) do
  local v = values[i]
  local j = v and read_job(v)
  if j and j.state == 1 then
    j.updated, j.claim = now, nil
    if j.left > 1 then
      j.state, j.left, j.run_after = 0, j.left - 1, now
      back[#back + 1] = {id_of(m), m, j.key}
      repended = repended + 1
    else
      j.state, j.left = 3, 0
      redis.call('ZADD', KEYS[3], score, m)
      failed = failed + 1
    end
    rows[#rows + 1] = m
    rows[#rows + 1] = job_value(j, body_of(v, j))
  end
end
hset_many(KEYS[4], rows)
-- Back to pending in id order, as every store puts jobs that come back
-- together in their lanes (a shard of another kind may not know the
-- order of their claims' ages).
table.sort(back, function(a, b) return a[1] < b[1] end)
for _, it in ipairs(back) do pend(KEYS[2], it[2], now, it[3], now) end
return {repended, failed}
