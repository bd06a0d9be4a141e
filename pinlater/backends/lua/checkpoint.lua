-- checkpoint: heartbeat of a RUNNING job (claim source matches):
-- updated_at = now; optionally a new body, new attempts (allowed =
-- remaining = given), a custom status prefix; with move_to_pending the job
-- goes back to PENDING (claim cleared, run_after = given or now, no attempt
-- spent); without it a given run_after is only stored. Stale: no change.
--
-- KEYS[3g-2]  pl:{queue}:p{N}:running     of priority group g (g = 1, 2, ...)
-- KEYS[3g-1]  pl:{queue}:p{N}:pending
-- KEYS[3g]    pl:{queue}:p{N}:j:          job hash prefix (job keys derived from it)
-- ARGV[1]     custom status cap (characters)
-- ARGV[2]     JSON array, per item: [g, local id, source, body index (0 =
--             no new body, else the body is ARGV[2 + index]), move_to_pending
--             (true/false), run_after ms or null, attempts_allowed or null,
--             status to prepend ('' = none)]
-- ARGV[3..]   new bodies (binary, so not inside the JSON)
-- Returns: per item 1 (applied) or 0 (stale).
local cap = tonumber(ARGV[1])
local items = cjson.decode(ARGV[2])
local ngroups = #KEYS / 3
for _, it in ipairs(items) do
  if not is_int(it[1]) or it[1] < 1 or it[1] > ngroups then return bad('checkpoint: bad group') end
  if not valid_id(it[2]) then return bad('checkpoint: bad id') end
  if type(it[3]) ~= 'string' or type(it[8]) ~= 'string' then
    return bad('checkpoint: bad source or status')
  end
  if not is_int(it[4]) or it[4] < 0 or ARGV[2 + it[4]] == nil then
    return bad('checkpoint: bad body index')
  end
  if type(it[5]) ~= 'boolean' then return bad('checkpoint: bad move_to_pending') end
  if opt(it[6]) ~= nil and not is_int(it[6]) then return bad('checkpoint: bad run_after') end
  if opt(it[7]) ~= nil and (not is_int(it[7]) or it[7] < 1) then
    return bad('checkpoint: bad attempts')
  end
end

local now = int(now_ms())
local out = {}
for i, it in ipairs(items) do
  local g = it[1]
  local k = id_key(KEYS[3 * g], it[2])
  local m = member_of(it[2])
  local f = redis.call('HMGET', k, 'state', 'claim', 'custom_status')
  if f[1] == '1' and claim_source(f[2]) == it[3] then
    local set = {'updated_at', now}
    if it[4] > 0 then
      set[#set + 1] = 'body'; set[#set + 1] = ARGV[2 + it[4]]
    end
    local attempts = opt(it[7])
    if attempts then
      set[#set + 1] = 'attempts_allowed'; set[#set + 1] = int(attempts)
      set[#set + 1] = 'attempts_remaining'; set[#set + 1] = int(attempts)
    end
    if it[8] ~= '' then
      set[#set + 1] = 'custom_status'
      set[#set + 1] = cap_left(it[8] .. (f[3] or ''), cap)
    end
    local run_after = opt(it[6])
    if it[5] then
      run_after = run_after and int(run_after) or now
      set[#set + 1] = 'state'; set[#set + 1] = 0
      set[#set + 1] = 'claim'; set[#set + 1] = ''
      set[#set + 1] = 'run_after'; set[#set + 1] = run_after
      redis.call('ZREM', KEYS[3 * g - 2], m)
      redis.call('ZADD', KEYS[3 * g - 1], run_after, m)
    else
      if run_after then
        set[#set + 1] = 'run_after'; set[#set + 1] = int(run_after)
      end
      -- running's score is the heartbeat time: expire_claims reads it.
      redis.call('ZADD', KEYS[3 * g - 2], now, m)
    end
    redis.call('HSET', k, unpack(set))
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
