-- retry_failed: FAILED -> PENDING for the most recently failed jobs:
-- attempts_allowed = attempts_remaining = attempts, run_after = given or
-- now, updated_at = now, claim cleared.
--
-- KEYS[1]  pl:{queue}:p{N}:failed
-- KEYS[2]  pl:{queue}:p{N}:pending
-- KEYS[3]  pl:{queue}:p{N}:jobs      jobs hash
-- ARGV[1]  attempts (1..65535)
-- ARGV[2]  run_after ms ('' = now)
-- ARGV[3]  limit (>= 1)
-- Returns: how many were moved.
local attempts = tonumber(ARGV[1])
local limit = tonumber(ARGV[3])
if not attempts or attempts < 1 or attempts > MAX_U16 then return bad('retry_failed: bad attempts') end
local given = tonumber(ARGV[2])
if ARGV[2] ~= '' and (not given or given < 0 or given > MAX_TIME) then return bad('retry_failed: bad run_after') end
if not limit or limit < 1 then return bad('retry_failed: bad limit') end
local now = now_ms()
local run_after = given or now
local members = redis.call('ZREVRANGE', KEYS[1], 0, limit - 1)
if #members == 0 then return 0 end
zrem_many(KEYS[1], members)
local values = hmget_many(KEYS[3], members)
local moved = 0
local rows, back = {}, {}
for i, m in ipairs(members) do
  local v = values[i]
  local j = v and read_job(v)
  if j and j.state == 3 then
    j.state, j.allowed, j.left, j.run_after, j.updated, j.claim = 0, attempts, attempts, run_after, now, nil
    rows[#rows + 1] = m
    rows[#rows + 1] = job_value(j, body_of(v, j))
    back[#back + 1] = {id_of(m), m, j.key}
    moved = moved + 1
  end
end
hset_many(KEYS[3], rows)
-- Back to pending in id order (see expire_claims).
table.sort(back, function(a, b) return a[1] < b[1] end)
for _, it in ipairs(back) do pend(KEYS[2], it[2], run_after, it[3], now) end
return moved
