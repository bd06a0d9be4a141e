-- scan: one page of jobs in one state, ordered by (sort_time desc,
-- local_id desc), strictly after the cursor (sort_time, id).
--
-- The zset score is the sort time and members order as their ids, so
-- ZREVRANGE order (score desc, then member desc) is exactly the scan order.
-- The page starts at a rank found in O(log^2 n): ZCOUNT gives the rank
-- range of the cursor's score, a binary search by rank (ZREVRANGE i i)
-- finds the first member below the cursor's within it. This is exact with
-- any number of equal scores and does not need the cursor's job to still
-- be there. Read-only.
--
-- KEYS[1]  pl:{queue}:p{N}:{state}    the state's zset
-- KEYS[2]  pl:{queue}:p{N}:jobs       jobs hash
-- ARGV[1]  'all', 'due' (score <= now) or 'future' (score > now)
-- ARGV[2]  limit (>= 1)
-- ARGV[3]  '1' to include bodies
-- ARGV[4]  cursor sort time ms ('' = no cursor)
-- ARGV[5]  cursor id
-- ARGV[6]  most body bytes the page may hold ('' = no bound)
-- Returns: list of {member, job value} (without the body unless asked for;
--          the format is in the prelude, decoded by record.py). The
--          job whose body would take the page past ARGV[6] ends the page,
--          as {member, value without its body, 1} (withheld).
--
-- With a bound, values are read one at a time and cut at once where not
-- wanted, so the script never holds more bodies than the bound at once.
local z = KEYS[1]
local mode = ARGV[1]
local limit = tonumber(ARGV[2])
if not limit or limit < 1 then return bad('scan: bad limit') end
if mode ~= 'all' and mode ~= 'due' and mode ~= 'future' then return bad('scan: bad mode') end
local now = now_ms()

-- Rank (in descending order) of the first element the page may hold.
local start = 0
if mode == 'due' then start = redis.call('ZCOUNT', z, '(' .. int(now), '+inf') end
if ARGV[4] ~= '' then
  local t = tonumber(ARGV[4])
  local cursor = tonumber(ARGV[5])
  if not t or not cursor then return bad('scan: bad cursor') end
  local lo = redis.call('ZCOUNT', z, '(' .. int(t), '+inf')
  local hi = lo + redis.call('ZCOUNT', z, int(t), int(t))
  -- Ranks lo..hi-1 share score t, members descending: find the first one
  -- below the cursor (exact for ids < 2^53).
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    local m = redis.call('ZREVRANGE', z, mid, mid)[1]
    if id_of(m) < cursor then hi = mid else lo = mid + 1 end
  end
  if lo > start then start = lo end
end

local rows = redis.call('ZREVRANGE', z, start, start + limit - 1, 'WITHSCORES')
local members = {}
for i = 1, #rows, 2 do
  -- 'future' pages end where due jobs begin.
  if mode == 'future' and tonumber(rows[i + 1]) <= now then break end
  members[#members + 1] = rows[i]
end
if #members == 0 then return {} end
local out = {}
local with_body = ARGV[3] == '1'
local budget = tonumber(ARGV[6] or '')
if not budget then
  -- Unbounded: one read of every value.
  local values = hmget_many(KEYS[2], members)
  for i, m in ipairs(members) do
    local v = values[i]
    if v then
      if not with_body then v = string.sub(v, 1, body_start(v) - 1) end
      out[#out + 1] = {m, v}
    end
  end
  return out
end
local size = 0
for _, m in ipairs(members) do
  local v = redis.call('HGET', KEYS[2], m)
  if v then
    local at = body_start(v)
    if not with_body then
      v = string.sub(v, 1, at - 1)
    else
      size = size + #v - at + 1
      if size > budget then
        out[#out + 1] = {m, string.sub(v, 1, at - 1), 1}
        return out
      end
    end
    out[#out + 1] = {m, v}
  end
end
return out
