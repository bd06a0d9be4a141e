-- ack_succeeded: RUNNING (claim source matches) -> SUCCEEDED. A stale ACK
-- (not RUNNING, or claimed by another source) changes nothing.
--
-- KEYS[3g-2]  pl:{queue}:p{N}:running     of priority group g (g = 1, 2, ...)
-- KEYS[3g-1]  pl:{queue}:p{N}:succeeded
-- KEYS[3g]    pl:{queue}:p{N}:jobs        jobs hash
-- ARGV[1]     custom status cap (characters)
-- ARGV[2]     JSON array, per item: [g, local id, source, status to append]
-- Returns: per item 1 (applied) or 0 (stale).
local cap = tonumber(ARGV[1])
local items = cjson.decode(ARGV[2])
local ngroups = #KEYS / 3
for _, it in ipairs(items) do
  if not is_int(it[1]) or it[1] < 1 or it[1] > ngroups then return bad('ack_succeeded: bad group') end
  if not valid_id(it[2]) then return bad('ack_succeeded: bad id') end
  if type(it[3]) ~= 'string' or type(it[4]) ~= 'string' then
    return bad('ack_succeeded: bad source or status')
  end
end

local now = now_ms()
local out = {}
local done = {}  -- per group: members that moved
for i, it in ipairs(items) do
  local g = it[1]
  local jobs = KEYS[3 * g]
  local m = member_of(it[2])
  local j, v = load_job(jobs, m)
  if j and j.state == 1 and claim_source(j.claim) == it[3] then
    if it[4] ~= '' then j.status = cap_right(j.status .. it[4], cap) end
    j.state, j.updated, j.claim = 2, now, nil
    save_job(jobs, m, j, v)
    done[g] = done[g] or {}
    done[g][#done[g] + 1] = m
    out[i] = 1
  else
    out[i] = 0
  end
end
local score = int(now)
for g, members in pairs(done) do
  zrem_many(KEYS[3 * g - 2], members)
  local flat = {}
  for _, m in ipairs(members) do
    flat[#flat + 1] = score
    flat[#flat + 1] = m
  end
  zadd_many(KEYS[3 * g - 1], flat)
end
return out
