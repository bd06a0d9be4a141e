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
--                fairness key (1..64 bytes; absent or null: none),
--                unique key (1..200 bytes; absent or null: none), and
--                with one: how long (ms) its key stays held after its job
--                SUCCEEDED]
-- ARGV[2+i]      body of item i (binary, so not inside the JSON)
-- Returns: per item in order, its new local id (increasing), or for an
--          item whose unique key a job holds, {priority, id} of that job
--          (an earlier item of the call with the same key counts); nil
--          (nothing stored) when the queue was deleted here.
--
-- Unique keys live in pl:{queue}:unique (the prelude's holds_unique),
-- named from KEYS[2]: the same hash slot.
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
  local u = opt(it[8])
  if u ~= nil and (type(u) ~= 'string' or #u < 1 or #u > 200 or not is_int(it[9]) or it[9] < 0) then
    return bad('enqueue: bad unique key')
  end
end

if redis.call('SISMEMBER', KEYS[4], ARGV[1]) == 1 then return false end

local now = now_ms()
-- Items whose unique key is held store nothing: dup[i] is the holder,
-- 'P:ID' or the index of an earlier item of this call.
local qbase = string.sub(KEYS[2], 1, #KEYS[2] - 3)
local uniq = qbase .. 'unique'
local dup, seen, fresh = {}, {}, n
-- field_of[u] is key u's field, made once; names[j] the key of fields[j].
local field_of, fields, names = {}, {}, {}
for i = 1, n do
  local u = opt(items[i][8])
  if u ~= nil and not field_of[u] then
    local f = 'k' .. u
    field_of[u] = f
    fields[#fields + 1] = f
    names[#names + 1] = u
  end
end
local at_of = {}
if #fields > 0 then
  local got = hmget_many(uniq, fields)
  for j, u in ipairs(names) do at_of[u] = got[j] end
end
for i = 1, n do
  local u = opt(items[i][8])
  if u ~= nil then
    local at = seen[u] or at_of[u]
    if type(at) == 'number' or (at and holds_unique(qbase, at, items[i][9], now)) then
      dup[i] = at
      fresh = fresh - 1
    else
      seen[u] = i
    end
  end
end
if fresh == 0 then
  local out = {}
  for i = 1, n do
    local p, id = string.match(dup[i], '^(%d+):(%d+)$')
    out[i] = {tonumber(p), tonumber(id)}
  end
  return out
end

local first = redis.call('INCRBY', KEYS[2], fresh) - fresh + 1
local ids = {}
local pends, rows, taken = {}, {}, {}
-- A group's jobs without a key go to its pending zset in one ZADD (lane
-- '' is that zset); keyed jobs go one by one, in item order (pend).
local made = 0
for i = 1, n do
  local it = items[i]
  local g = it[1]
  if dup[i] == nil then
    local run_after = opt(it[3]) or now
    made = made + 1
    local id = first + made - 1
    local m = member_of(id)
    local key = opt(it[7]) or ''
    local job = {state = 0, allowed = it[4], left = it[4], created = now, updated = now,
      run_after = run_after, status = it[5], trace = opt(it[6]), key = key}
    if not rows[g] then
      pends[g], rows[g] = {}, {}
      redis.call('SADD', KEYS[3], int(it[2]))
    end
    local r = rows[g]
    if key ~= '' then
      pend(KEYS[3 + 2 * g], m, run_after, key, now)
    else
      local p = pends[g]
      p[#p + 1] = int(run_after)
      p[#p + 1] = m
    end
    r[#r + 1] = m
    r[#r + 1] = job_value(job, ARGV[2 + i])
    ids[i] = id
    if opt(it[8]) ~= nil then
      local at = int(it[2]) .. ':' .. int(id)
      taken[#taken + 1] = field_of[it[8]]
      taken[#taken + 1] = at
    end
  end
end
for g, flat in pairs(rows) do
  hset_many(KEYS[4 + 2 * g], flat)
  if #pends[g] > 0 then zadd_many(KEYS[3 + 2 * g], pends[g]) end
end
if #taken > 0 then hset_many(uniq, taken) end
redis.call('SADD', KEYS[1], ARGV[1])
for i, at in pairs(dup) do
  if type(at) == 'number' then
    ids[i] = {items[at][2], ids[at]}
  else
    local p, id = string.match(at, '^(%d+):(%d+)$')
    ids[i] = {tonumber(p), tonumber(id)}
  end
end
return ids
