-- delete_queue: one bounded step of dropping a queue. Deletes up to `batch`
-- jobs; once every zset is empty it deletes the remaining keys and the
-- queue's name. The client repeats until 0, so the server is never blocked
-- for long however big the queue is.
--
-- Every job is in exactly one zset of its priority, and every priority
-- that ever held a job is in pl:{queue}:prios (enqueue adds it), so this
-- reaches every key of the queue without SCAN. The first step records the
-- queue in pl:deleted, so no enqueue gives it storage again meanwhile or
-- after (until create_queue).
--
-- KEYS[1]  pl:queues
-- KEYS[2]  pl:{queue}:prios
-- KEYS[3]  pl:{queue}:ids
-- KEYS[4]  pl:deleted
-- KEYS[5+5(g-1) ...] per priority group g: pending, running, succeeded,
--          failed zsets, then the jobs hash
-- ARGV[1]  queue name
-- ARGV[2]  batch (>= 1)
-- ARGV[3..] the priorities of the groups, in order
-- Returns: 0 when the queue is gone, 1 when more steps are needed (jobs
--          left, or pl:{queue}:prios holds a priority the client did not pass).
local budget = tonumber(ARGV[2])
if not budget or budget < 1 then return bad('delete_queue: bad batch') end
redis.call('SADD', KEYS[4], ARGV[1])
local ngroups = (#KEYS - 4) / 5
for g = 1, ngroups do
  local jobs = KEYS[4 + 5 * g]
  -- The priority's lanes first (the prelude's fair service): each lane
  -- with jobs is in turns or waits.
  local base = base_of(KEYS[4 + 5 * (g - 1) + 1])
  if budget <= 0 then return 1 end
  local lanes = redis.call('LRANGE', base .. 'turns', 0, budget - 1)
  for _, lane in ipairs(lanes) do redis.call('UNLINK', base .. 'lane:' .. lane) end
  redis.call('LTRIM', base .. 'turns', #lanes, -1)
  budget = budget - #lanes
  if redis.call('EXISTS', base .. 'turns') == 1 then return 1 end
  -- The keyed index may be large: UNLINK frees it off the main thread.
  redis.call('UNLINK', base .. 'inturn', base .. 'keyed')
  if budget <= 0 then return 1 end
  lanes = redis.call('ZRANGE', base .. 'waits', 0, budget - 1)
  for _, lane in ipairs(lanes) do
    redis.call('UNLINK', base .. 'lane:' .. lane)
    redis.call('ZREM', base .. 'waits', lane)
  end
  budget = budget - #lanes
  if redis.call('EXISTS', base .. 'waits') == 1 then return 1 end
  for j = 0, 3 do
    if budget <= 0 then return 1 end
    local z = KEYS[4 + 5 * (g - 1) + 1 + j]
    local members = redis.call('ZRANGE', z, 0, budget - 1)
    if #members > 0 then
      redis.call('ZREMRANGEBYRANK', z, 0, #members - 1)
      hdel_many(jobs, members)
      budget = budget - #members
      if redis.call('EXISTS', z) == 1 then return 1 end
    end
  end
  -- Every job of the priority is gone, so is its hash (Redis drops an
  -- empty hash); DEL covers a field no zset listed.
  redis.call('DEL', jobs)
  -- The owners index (the prelude's owners_of) may be large, as the
  -- keyed index.
  redis.call('UNLINK', owners_of(KEYS[4 + 5 * (g - 1) + 2]))
end
local passed = {}
for i = 3, #ARGV do passed[ARGV[i]] = true end
for _, p in ipairs(redis.call('SMEMBERS', KEYS[2])) do
  if not passed[p] then return 1 end
end
redis.call('DEL', KEYS[2], KEYS[3])
-- The unique keys' hash (the prelude's holds_unique), beside the id counter.
redis.call('UNLINK', string.sub(KEYS[3], 1, #KEYS[3] - 3) .. 'unique')
redis.call('SREM', KEYS[1], ARGV[1])
return 0
