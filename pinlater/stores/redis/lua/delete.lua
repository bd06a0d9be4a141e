-- delete: remove jobs in one state: the given ids that are still in that
-- state (membership of the state's zset == being in that state), or with
-- no ids, up to limit of them (oldest sort time first).
--
-- KEYS[1]  pl:{queue}:p{N}:{state}    the state's zset
-- KEYS[2]  pl:{queue}:p{N}:jobs       jobs hash
-- ARGV[1]  mode: 'ids' or 'limit'
-- ARGV[2]  limit (used in 'limit' mode)
-- ARGV[3..] members (see member_of), in 'ids' mode
-- Returns: how many were deleted.
--
-- A deleted job's unique key is free at once (its job is gone) and its
-- entry is swept (drop_unique).
-- Keyed pending jobs of a priority that keeps lanes leave their lane and
-- the keyed index too (the prelude's unpend_keyed), which must match the
-- pending zset.
local lanes = string.sub(KEYS[1], -8) == ':pending' and lanes_on(KEYS[1])
local base = lanes and base_of(KEYS[1])
-- Running jobs leave the owners index too.
local running = string.sub(KEYS[1], -8) == ':running'

-- Pending job m, whose score was s and value v, leaves its lane.
local function leave_lane(m, s, v)
  if not (lanes and v and s) then return end
  local key = read_job(v).key
  if key ~= '' then unpend_keyed(base, key, tonumber(s), m) end
end

if ARGV[1] == 'ids' then
  for i = 3, #ARGV do
    if not valid_member(ARGV[i]) then return bad('delete: bad member') end
  end
  local gone = {}
  for i = 3, #ARGV do
    local s = lanes and redis.call('ZSCORE', KEYS[1], ARGV[i])
    if redis.call('ZREM', KEYS[1], ARGV[i]) == 1 then
      if lanes then leave_lane(ARGV[i], s, redis.call('HGET', KEYS[2], ARGV[i])) end
      redis.call('HDEL', KEYS[2], ARGV[i])
      if running then redis.call('HDEL', owners_of(KEYS[1]), ARGV[i]) end
      gone[#gone + 1] = ARGV[i]
    end
  end
  drop_unique(KEYS[2], gone)
  return #gone
end
local limit = tonumber(ARGV[2])
if ARGV[1] ~= 'limit' or not limit then return bad('delete: bad arguments') end
if limit < 1 then return 0 end
local members, scores = {}, {}
local rows = redis.call('ZRANGE', KEYS[1], 0, limit - 1, 'WITHSCORES')
for i = 1, #rows, 2 do
  members[#members + 1] = rows[i]
  scores[#scores + 1] = rows[i + 1]
end
if #members == 0 then return 0 end
redis.call('ZREMRANGEBYRANK', KEYS[1], 0, #members - 1)
if lanes then
  local values = hmget_many(KEYS[2], members)
  for i, m in ipairs(members) do leave_lane(m, scores[i], values[i]) end
end
hdel_many(KEYS[2], members)
if running then unindex(KEYS[1], members) end
drop_unique(KEYS[2], members)
return #members
