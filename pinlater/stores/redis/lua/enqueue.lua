-- enqueue: new jobs -> PENDING. All items are stored or none: every
-- argument is validated before the first write (a Lua error after a write
-- would not roll back), and Redis refuses only a script's *first* write
-- when out of memory, so a started batch always completes.
--
-- A queue deleted on this shard (in pl:deleted) gets no storage back from
-- an enqueue: the caller's config of it is stale, and the jobs would be
-- orphans no worker or operator sees. create_queue lifts that.
--
-- KEYS[1]        pl:queues                  (set of queue names)
-- KEYS[2]        pl:{queue}:ids             (id counter)
-- KEYS[3]        pl:{queue}:prios           (set of priorities with storage)
-- KEYS[4]        pl:deleted                 (set of queues deleted here)
-- KEYS[3+2g]     pl:{queue}:p{N}:pending    of priority group g (g = 1, 2, ...)
-- KEYS[4+2g]     pl:{queue}:p{N}:jobs       jobs hash of group g
-- ARGV[1]        queue name
-- ARGV[2]        JSON array, per item: [g, priority N, run_after ms or null
--                (= now), attempts_allowed (1..65535), custom_status,
--                trace context (up to 255 bytes; absent or null: none),
--                fairness key (1..64 bytes; absent or null: none)]
-- ARGV[2+i]      body of item i (binary, so not inside the JSON)
-- Returns: the new local ids, in item order (consecutive, increasing);
--          nil (nothing stored) when the queue was deleted here.
local items = cjson.decode(ARGV[2])
local n = #items
if n < 1 or #ARGV ~= 2 + n then return bad('enqueue: item count does not match bodies') end
local ngroups = (#KEYS - 4) / 2
for i = 1, n do
  local it = items[i]
  if not is_int(it[1]) or it[1] < 1 or it[1] > ngroups then return bad('enqueue: bad group') end
  if not is_int(it[2]) then return bad('enqueue: bad priority') end
  local run_after = opt(it[3])
  if run_after ~= nil and (not is_int(run_after) or run_after < 0 or run_after > MAX_TIME) then
    return bad('enqueue: bad run_after')
  end
  if not is_int(it[4]) or it[4] < 1 then return bad('enqueue: attempts_allowed must be >= 1') end
  if it[4] > MAX_U16 then return bad('enqueue: attempts_allowed must be <= 65535') end
  if type(it[5]) ~= 'string' then return bad('enqueue: bad custom_status') end
  local trace = opt(it[6])
  if trace ~= nil and (type(trace) ~= 'string' or #trace > 255) then return bad('enqueue: bad trace') end
  if not valid_key(opt(it[7])) then return bad('enqueue: bad key') end
end

if redis.call('SISMEMBER', KEYS[4], ARGV[1]) == 1 then return false end

local now = now_ms()
local first = redis.call('INCRBY', KEYS[2], n) - n + 1
local ids = {}
local pends, rows = {}, {}
-- A group goes to its pending zset in one ZADD unless it keeps lanes or
-- one of its jobs has a key: then job by job, in item order (pend).
local one_by_one = {}
for i = 1, n do
  local it = items[i]
  local g = it[1]
  if one_by_one[g] == nil then one_by_one[g] = lanes_on(KEYS[3 + 2 * g]) end
  if opt(it[7]) then one_by_one[g] = true end
end
for i = 1, n do
  local it = items[i]
  local g = it[1]
  local run_after = opt(it[3]) or now
  local id = first + i - 1
  local m = member_of(id)
  local key = opt(it[7]) or ''
  local job = {state = 0, allowed = it[4], left = it[4], created = now, updated = now,
    run_after = run_after, status = it[5], trace = opt(it[6]), key = key}
  if not rows[g] then
    pends[g], rows[g] = {}, {}
    redis.call('SADD', KEYS[3], int(it[2]))
  end
  local r = rows[g]
  if one_by_one[g] then
    pend(KEYS[3 + 2 * g], m, run_after, key, now)
  else
    local p = pends[g]
    p[#p + 1] = int(run_after)
    p[#p + 1] = m
  end
  r[#r + 1] = m
  r[#r + 1] = job_value(job, ARGV[2 + i])
  ids[i] = id
end
for g, flat in pairs(rows) do
  hset_many(KEYS[4 + 2 * g], flat)
  if #pends[g] > 0 then zadd_many(KEYS[3 + 2 * g], pends[g]) end
end
redis.call('SADD', KEYS[1], ARGV[1])
return ids
