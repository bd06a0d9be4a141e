-- running_owners: how many of a priority's RUNNING jobs each claim owner
-- holds per fairness key, the owner being the first `n` characters of the
-- claim's token.
-- One atomic read (pinlater/engine/slots.py settles a gone process's
-- slots with it, on every monitor pass of a capped queue); a capped
-- queue's running jobs are about its cap. It reads the owners index (the
-- prelude's owners_of), a few bytes a job, and the jobs without an entry
-- (at most OWNERS_INDEX_MIN bytes each, unless claimed while their queue
-- had no cap), so never a big body.
--
-- KEYS[1]  pl:{queue}:p{N}:running
-- KEYS[2]  pl:{queue}:p{N}:jobs       jobs hash
-- ARGV[1]  n, the owner's length (1..16, the token's)
-- Returns: owner, key ('' none), count, owner, key, count...
local n = tonumber(ARGV[1])
if not n or n < 1 or n > 16 then return bad('running_owners: bad length') end
local counts = {}
-- Owners are hex: a NUL cannot be part of one.
local function count(token, key)
  local at = string.sub(token, 1, n) .. '\0' .. key
  counts[at] = (counts[at] or 0) + 1
end
local owners = owners_of(KEYS[1])
local members = redis.call('ZRANGE', KEYS[1], 0, -1)
for i = 1, #members, 1000 do
  local chunk = {unpack(members, i, math.min(i + 999, #members))}
  local marks = hmget_many(owners, chunk)
  local unmarked = {}
  for k = 1, #chunk do
    local mark = marks[k]
    if mark then
      count(mark, string.sub(mark, 18))  -- token(16) .. NUL .. key
    else
      unmarked[#unmarked + 1] = chunk[k]
    end
  end
  local values = hmget_many(KEYS[2], unmarked)
  for k = 1, #unmarked do
    local v = values[k]
    if v then
      local j = read_job(v)
      if j.state == 1 and j.claim then count(j.claim, j.key) end
    end
  end
end
local out = {}
for at, c in pairs(counts) do
  local cut = string.find(at, '\0', 1, true)
  out[#out + 1] = string.sub(at, 1, cut - 1)
  out[#out + 1] = string.sub(at, cut + 1)
  out[#out + 1] = c
end
return out
