-- ack_succeeded: RUNNING (the item holds the claim) -> SUCCEEDED. A stale
-- ACK (not RUNNING, or under another claim) changes nothing.
--
-- KEYS[3g-2]  pl:{queue}:p{N}:running     of priority group g (g = 1, 2, ...)
-- KEYS[3g-1]  pl:{queue}:p{N}:succeeded
-- KEYS[3g]    pl:{queue}:p{N}:jobs        jobs hash
-- ARGV[1]     custom status cap (characters)
-- ARGV[2]     JSON array, per item: [g, local id, source, status to append,
--             claim (only when the item names one: then it, not the
--             source, must hold the job)]
-- Returns: per item 1 (applied) or 0 (stale).
local cap = tonumber(ARGV[1])
local items = cjson.decode(ARGV[2])
local ngroups = #KEYS / 3
for _, it in ipairs(items) do
  if not is_int(it[1]) or it[1] < 1 or it[1] > ngroups then return bad('ack_succeeded: bad group') end
  if not valid_id(it[2]) then return bad('ack_succeeded: bad id') end
  if type(it[3]) ~= 'string' or type(it[4]) ~= 'string' or not valid_claim(it[5]) then
    return bad('ack_succeeded: bad source, status or claim')
  end
end

local now = now_ms()
local score = int(now)
local out = {}
for g, idx in pairs(by_group(items)) do
  local jobs = KEYS[3 * g]
  local members = {}
  for k, i in ipairs(idx) do members[k] = member_of(items[i][2]) end
  local values = hmget_many(jobs, members)
  local done, rows, moved = {}, {}, {}
  for k, i in ipairs(idx) do
    local it, m, v = items[i], members[k], values[k]
    local j = v and not done[m] and read_job(v)
    if j and j.state == 1 and holds(j, it[3], it[5]) then
      if it[4] ~= '' then j.status = cap_right(j.status .. it[4], cap) end
      j.state, j.updated, j.claim = 2, now, nil
      done[m] = true
      rows[#rows + 1] = m
      rows[#rows + 1] = job_value(j, body_of(v, j))
      moved[#moved + 1] = score
      moved[#moved + 1] = m
      out[i] = 1
    else
      out[i] = 0
    end
  end
  hset_many(jobs, rows)
  local members_moved = {}
  for k = 2, #moved, 2 do members_moved[#members_moved + 1] = moved[k] end
  zrem_many(KEYS[3 * g - 2], members_moved)
  unindex(KEYS[3 * g - 2], members_moved)
  zadd_many(KEYS[3 * g - 1], moved)
end
return out
