-- ack_failed: RUNNING (the item holds the claim) ->
-- PENDING with attempts_remaining - 1 and run_after = now + delay when
-- attempts_remaining > 1, else FAILED with attempts_remaining = 0. A stale
-- ACK changes nothing. The delay is the item's own or else the retry
-- policy's for the job's retry number, from the delay table: no read by the
-- caller before this write.
--
-- KEYS[4g-3]  pl:{queue}:p{N}:running     of priority group g (g = 1, 2, ...)
-- KEYS[4g-2]  pl:{queue}:p{N}:pending
-- KEYS[4g-1]  pl:{queue}:p{N}:failed
-- KEYS[4g]    pl:{queue}:p{N}:jobs        jobs hash
-- ARGV[1]     custom status cap (characters)
-- ARGV[2]     JSON array, per item: [g, local id, source, status to append,
--             delay ms or null (= the policy's), claim (only when the item
--             names one: then it, not the source, must hold the job)]
-- ARGV[3]     JSON array: the policy's delay before retry number 1, 2, ...;
--             the last entry holds for every later retry
-- Returns: per item 1 (applied) or 0 (stale).
local cap = tonumber(ARGV[1])
local items = cjson.decode(ARGV[2])
local delays = cjson.decode(ARGV[3])
if type(delays) ~= 'table' or #delays < 1 then return bad('ack_failed: bad delay table') end
for _, d in ipairs(delays) do
  if not is_int(d) then return bad('ack_failed: bad delay table') end
end
local ngroups = #KEYS / 4
for _, it in ipairs(items) do
  if not is_int(it[1]) or it[1] < 1 or it[1] > ngroups then return bad('ack_failed: bad group') end
  if not valid_id(it[2]) then return bad('ack_failed: bad id') end
  if type(it[3]) ~= 'string' or type(it[4]) ~= 'string' or not valid_claim(it[6]) then
    return bad('ack_failed: bad source, status or claim')
  end
  if opt(it[5]) ~= nil and not is_int(it[5]) then return bad('ack_failed: bad delay') end
end

local now = now_ms()
local out = {}
for i, it in ipairs(items) do
  local g = it[1]
  local jobs = KEYS[4 * g]
  local m = member_of(it[2])
  local j, v = load_job(jobs, m)
  if j and j.state == 1 and holds(j, it[3], it[6]) then
    if it[4] ~= '' then j.status = cap_right(j.status .. it[4], cap) end
    redis.call('ZREM', KEYS[4 * g - 3], m)
    redis.call('HDEL', owners_of(KEYS[4 * g - 3]), m)
    local left = j.left
    j.updated, j.claim = now, nil
    if left > 1 then
      local delay = opt(it[5])
      if delay == nil then
        local retry = j.allowed - left + 1
        delay = delays[math.min(math.max(retry, 1), #delays)]
      end
      j.state, j.left = 0, left - 1
      j.run_after = math.min(math.max(now + delay, 0), MAX_TIME)
      pend(KEYS[4 * g - 2], m, j.run_after, j.key, now)
    else
      j.state, j.left = 3, 0
      redis.call('ZADD', KEYS[4 * g - 1], int(now), m)
    end
    save_job(jobs, m, j, v)
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
