-- running_owners: how many of a priority's RUNNING jobs each claim owner
-- holds, the owner being the first `n` characters of the claim's token.
-- One atomic read (pinlater/engine/slots.py settles a gone process's
-- slots with it); a capped queue's running jobs are about its cap.
--
-- KEYS[1]  pl:{queue}:p{N}:running
-- KEYS[2]  pl:{queue}:p{N}:jobs       jobs hash
-- ARGV[1]  n, the owner's length
-- Returns: owner, count, owner, count...
local n = tonumber(ARGV[1])
if not n or n < 1 then return bad('running_owners: bad length') end
local counts = {}
local members = redis.call('ZRANGE', KEYS[1], 0, -1)
for i = 1, #members, 1000 do
  local chunk = {unpack(members, i, math.min(i + 999, #members))}
  local values = hmget_many(KEYS[2], chunk)
  for k = 1, #chunk do
    local v = values[k]
    if v then
      local j = read_job(v)
      if j.state == 1 and j.claim then
        local owner = string.sub(j.claim, 1, n)
        counts[owner] = (counts[owner] or 0) + 1
      end
    end
  end
end
local out = {}
for owner, c in pairs(counts) do
  out[#out + 1] = owner
  out[#out + 1] = c
end
return out
