-- enqueue: new jobs -> PENDING. All items are stored or none: every
-- argument is validated before the first write (a Lua error after a write
-- would not roll back), and Redis refuses only a script's *first* write
-- when out of memory, so a started batch always completes.
--
-- KEYS[1]        pl:queues                  (set of queue names)
-- KEYS[2]        pl:{queue}:ids             (id counter)
-- KEYS[3]        pl:{queue}:prios           (set of priorities with storage)
-- KEYS[2+2g]     pl:{queue}:p{N}:pending    of priority group g (g = 1, 2, ...)
-- KEYS[3+2g]     pl:{queue}:p{N}:j:         job hash prefix of group g
-- ARGV[1]        queue name
-- ARGV[2]        JSON array, per item: [g, priority N, run_after ms or null
--                (= now), attempts_allowed (>= 1), custom_status]
-- ARGV[2+i]      body of item i (binary, so not inside the JSON)
-- Returns: the new local ids, in item order (consecutive, increasing).
local items = cjson.decode(ARGV[2])
local n = #items
if n < 1 or #ARGV ~= 2 + n then return bad('enqueue: item count does not match bodies') end
local ngroups = (#KEYS - 3) / 2
for i = 1, n do
  local it = items[i]
  if not is_int(it[1]) or it[1] < 1 or it[1] > ngroups then return bad('enqueue: bad group') end
  if not is_int(it[2]) then return bad('enqueue: bad priority') end
  if opt(it[3]) ~= nil and not is_int(it[3]) then return bad('enqueue: bad run_after') end
  if not is_int(it[4]) or it[4] < 1 then return bad('enqueue: attempts_allowed must be >= 1') end
  if type(it[5]) ~= 'string' then return bad('enqueue: bad custom_status') end
end

local now = now_ms()
local first = redis.call('INCRBY', KEYS[2], n) - n + 1
local ids = {}
local pend = {}
for i = 1, n do
  local it = items[i]
  local g = it[1]
  local run_after = int(opt(it[3]) or now)
  local id = first + i - 1
  redis.call('HSET', id_key(KEYS[3 + 2 * g], id),
    'body', ARGV[2 + i], 'state', 0,
    'attempts_allowed', int(it[4]), 'attempts_remaining', int(it[4]),
    'custom_status', it[5], 'created_at', int(now),
    'run_after', run_after, 'updated_at', int(now), 'claim', '')
  if not pend[g] then
    pend[g] = {}
    redis.call('SADD', KEYS[3], int(it[2]))
  end
  local p = pend[g]
  p[#p + 1] = run_after
  p[#p + 1] = member_of(id)
  ids[i] = id
end
for g, flat in pairs(pend) do zadd_many(KEYS[2 + 2 * g], flat) end
redis.call('SADD', KEYS[1], ARGV[1])
return ids
