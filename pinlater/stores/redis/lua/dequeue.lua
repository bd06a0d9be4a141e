-- dequeue: PENDING with run_after <= now -> RUNNING under one new claim,
-- over several priorities in the order given, at most `limit` in all;
-- within a priority oldest run_after first, then lowest id (zset order:
-- score, then member, and members order as their ids). With an empty claim
-- it is a peek: the same jobs, nothing changed. Then, if fewer than `limit`
-- were found, the first look-ahead priority with a runnable job, so that
-- one call per shard serves every priority (pinlater/engine/priority_walk.py).
--
-- KEYS[3g-2]  pl:{queue}:p{N}:pending    of claim group g (g = 1..n)
-- KEYS[3g-1]  pl:{queue}:p{N}:running
-- KEYS[3g]    pl:{queue}:p{N}:jobs       jobs hash
-- KEYS[3n+k]  pl:{queue}:p{M}:pending    of look-ahead priority k
-- ARGV[1]     limit (>= 1)
-- ARGV[2]     claim 'TOKEN@source' (TOKEN: 16 lowercase hex, new per call), '' to peek
-- ARGV[3]     n, then ARGV[4..3+n] the claim groups' priorities and
--             ARGV[4+n..] the look-ahead priorities
-- Returns: {next priority or 0, then per job: priority, id, body,
--           attempts_allowed, attempts_remaining, trace ('' if none), run_after}
local limit = tonumber(ARGV[1])
if not limit or limit < 1 then return bad('dequeue: bad limit') end
local claim = ARGV[2]
local n = tonumber(ARGV[3])
if not n or n < 1 or #KEYS ~= #ARGV - 3 + 2 * n then return bad('dequeue: bad groups') end
local now = now_ms()
local out = {0}
local left = limit
for g = 1, n do
  local pending, running, jobs = KEYS[3 * g - 2], KEYS[3 * g - 1], KEYS[3 * g]
  local members = redis.call('ZRANGEBYSCORE', pending, '-inf', int(now), 'LIMIT', 0, left)
  if #members > 0 then
    -- They are exactly the first #members by rank.
    if claim ~= '' then redis.call('ZREMRANGEBYRANK', pending, 0, #members - 1) end
    local values = hmget_many(jobs, members)
    local run, rows = {}, {}
    local priority = tonumber(ARGV[3 + g])
    for i, m in ipairs(members) do
      local v = values[i]
      -- A member without its job cannot happen through these scripts; drop
      -- it rather than make up a job.
      if v then
        local j = read_job(v)
        local body = body_of(v, j)
        if claim ~= '' then
          j.state, j.claim, j.updated = 1, claim, now
          rows[#rows + 1] = m
          rows[#rows + 1] = job_value(j, body)
          run[#run + 1] = int(now)
          run[#run + 1] = m
        end
        out[#out + 1] = priority
        out[#out + 1] = id_of(m)
        out[#out + 1] = body
        out[#out + 1] = j.allowed
        out[#out + 1] = j.left
        out[#out + 1] = j.trace
        out[#out + 1] = j.run_after
      end
    end
    hset_many(jobs, rows)
    zadd_many(running, run)
    left = left - #members
    if left <= 0 then return out end
  end
end
for k = 3 * n + 1, #KEYS do
  if #redis.call('ZRANGEBYSCORE', KEYS[k], '-inf', int(now), 'LIMIT', 0, 1) > 0 then
    out[1] = tonumber(ARGV[k - 2 * n + 3])
    return out
  end
end
return out
