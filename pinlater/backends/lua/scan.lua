-- scan: one page of jobs in one state, ordered by (sort_time desc,
-- local_id desc), strictly after the cursor (sort_time, member).
--
-- The zset score is the sort time and members are zero-padded ids, so
-- ZREVRANGE order (score desc, then member desc) is exactly the scan order.
-- The page starts at a rank found in O(log^2 n): ZCOUNT gives the rank
-- range of the cursor's score, a binary search by rank (ZREVRANGE i i)
-- finds the first member below the cursor's within it. This is exact with
-- any number of equal scores and does not need the cursor's job to still
-- be there. Read-only.
--
-- KEYS[1]  pl:{queue}:p{N}:{state}    the state's zset
-- KEYS[2]  pl:{queue}:p{N}:j:         job hash prefix (job keys derived from it)
-- ARGV[1]  'all', 'due' (score <= now) or 'future' (score > now)
-- ARGV[2]  limit (>= 1)
-- ARGV[3]  '1' to include bodies
-- ARGV[4]  cursor sort time ms ('' = no cursor)
-- ARGV[5]  cursor member (20-digit id)
-- Returns: list of {member, state, attempts_allowed, attempts_remaining,
--          custom_status, created_at, run_after, updated_at, claim[, body]}
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
  -- below the cursor (numeric compare: exact for ids < 2^53).
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    local m = redis.call('ZREVRANGE', z, mid, mid)[1]
    if tonumber(m) < cursor then hi = mid else lo = mid + 1 end
  end
  if lo > start then start = lo end
end

local fields = {'state', 'attempts_allowed', 'attempts_remaining', 'custom_status',
  'created_at', 'run_after', 'updated_at', 'claim'}
if ARGV[3] == '1' then fields[#fields + 1] = 'body' end
local rows = redis.call('ZREVRANGE', z, start, start + limit - 1, 'WITHSCORES')
local out = {}
for i = 1, #rows, 2 do
  -- 'future' pages end where due jobs begin.
  if mode == 'future' and tonumber(rows[i + 1]) <= now then break end
  local f = redis.call('HMGET', job_key(KEYS[2], rows[i]), unpack(fields))
  if f[1] then
    table.insert(f, 1, rows[i])
    out[#out + 1] = f
  end
end
return out
