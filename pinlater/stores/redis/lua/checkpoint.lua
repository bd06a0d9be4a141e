-- checkpoint: heartbeat of a RUNNING job (the item holds the claim):
-- updated_at = now; optionally a new body, new attempts (allowed =
-- remaining = given), a custom status prefix; with move_to_pending the job
-- goes back to PENDING (claim cleared, run_after = given or now, no attempt
-- spent); without it a given run_after is only stored. Stale: no change.
--
-- KEYS[3g-2]  pl:{queue}:p{N}:running     of priority group g (g = 1, 2, ...)
-- KEYS[3g-1]  pl:{queue}:p{N}:pending
-- KEYS[3g]    pl:{queue}:p{N}:jobs        jobs hash
-- ARGV[1]     custom status cap (characters)
-- ARGV[2]     JSON array, per item: [g, local id, source, body index (0 =
--             no new body, else the body is ARGV[2 + index]), move_to_pending
--             (true/false), run_after ms or null, attempts_allowed or null,
--             status to prepend ('' = none), claim (only when the item
--             names one: then it, not the source, must hold the job)]
-- ARGV[3..]   new bodies (binary, so not inside the JSON)
-- Returns: per item 1 (applied) or 0 (stale).
local cap = tonumber(ARGV[1])
local items = cjson.decode(ARGV[2])
local ngroups = #KEYS / 3
for _, it in ipairs(items) do
  if not is_int(it[1]) or it[1] < 1 or it[1] > ngroups then return bad('checkpoint: bad group') end
  if not valid_id(it[2]) then return bad('checkpoint: bad id') end
  if type(it[3]) ~= 'string' or type(it[8]) ~= 'string' or not valid_claim(it[9]) then
    return bad('checkpoint: bad source, status or claim')
  end
  if not is_int(it[4]) or it[4] < 0 or ARGV[2 + it[4]] == nil then
    return bad('checkpoint: bad body index')
  end
  if type(it[5]) ~= 'boolean' then return bad('checkpoint: bad move_to_pending') end
  local run_after = opt(it[6])
  if run_after ~= nil and (not is_int(run_after) or run_after < 0 or run_after > MAX_TIME) then
    return bad('checkpoint: bad run_after')
  end
  local attempts = opt(it[7])
  if attempts ~= nil and (not is_int(attempts) or attempts < 1 or attempts > MAX_U16) then
    return bad('checkpoint: bad attempts')
  end
end

local now = now_ms()
local out = {}
for i, it in ipairs(items) do
  local g = it[1]
  local jobs = KEYS[3 * g]
  local m = member_of(it[2])
  local j, v = load_job(jobs, m)
  if j and j.state == 1 and holds(j, it[3], it[9]) then
    j.updated = now
    local body = it[4] > 0 and ARGV[2 + it[4]] or body_of(v, j)
    local attempts = opt(it[7])
    if attempts then j.allowed, j.left = attempts, attempts end
    if it[8] ~= '' then j.status = cap_left(it[8] .. j.status, cap) end
    local run_after = opt(it[6])
    if it[5] then
      j.state, j.claim, j.run_after = 0, nil, run_after or now
      redis.call('ZREM', KEYS[3 * g - 2], m)
      redis.call('HDEL', owners_of(KEYS[3 * g - 2]), m)
      pend(KEYS[3 * g - 1], m, j.run_after, j.key, now)
    else
      if run_after then j.run_after = run_after end
      -- running's score is the heartbeat time: expire_claims reads it.
      redis.call('ZADD', KEYS[3 * g - 2], int(now), m)
    end
    redis.call('HSET', jobs, m, job_value(j, body))
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
