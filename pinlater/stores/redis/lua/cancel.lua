-- cancel: jobs of one priority that are PENDING or RUNNING end FAILED at
-- once (attempts_remaining 0, claim cleared, the status appended); jobs
-- in another state, and ids with no job, are left as they are. A pending
-- job leaves its lane too (as in delete.lua).
--
-- KEYS[1]  pl:{queue}:p{N}:pending
-- KEYS[2]  pl:{queue}:p{N}:running
-- KEYS[3]  pl:{queue}:p{N}:failed
-- KEYS[4]  pl:{queue}:p{N}:jobs       jobs hash
-- ARGV[1]  custom status cap (characters)
-- ARGV[2]  the status to append
-- ARGV[3..] members (see member_of)
-- Returns: per member {state before (-1: no such job), claim or '', key or ''}.
local cap = tonumber(ARGV[1])
if not cap or type(ARGV[2]) ~= 'string' then return bad('cancel: bad arguments') end
for i = 3, #ARGV do
  if not valid_member(ARGV[i]) then return bad('cancel: bad member') end
end
local lanes = lanes_on(KEYS[1])
local base = base_of(KEYS[1])
local now = now_ms()
local out = {}
for i = 3, #ARGV do
  local m = ARGV[i]
  local j, v = load_job(KEYS[4], m)
  if not j then
    out[#out + 1] = {-1, '', ''}
  else
    local before, claim = j.state, j.claim or ''
    if before == 0 or before == 1 then
      if before == 0 then
        if lanes and j.key ~= '' then
          local s = redis.call('ZSCORE', KEYS[1], m)
          if s then unpend_keyed(base, j.key, tonumber(s), m) end
        end
        redis.call('ZREM', KEYS[1], m)
        claim = ''
      else
        redis.call('ZREM', KEYS[2], m)
        redis.call('HDEL', owners_of(KEYS[2]), m)
      end
      if ARGV[2] ~= '' then j.status = cap_right(j.status .. ARGV[2], cap) end
      j.state, j.left, j.claim, j.updated = 3, 0, nil, now
      redis.call('ZADD', KEYS[3], int(now), m)
      save_job(KEYS[4], m, j, v)
    end
    out[#out + 1] = {before, claim, j.key}
  end
end
return out
