-- upgrade_v3: one bounded step of `pinlater migrate` from layout 2 (a hash
-- per job, members zero-padded to 20 digits) to layout 3 (one field per
-- job in the priority's jobs hash, short members). Converts the layout-2
-- members among ranks start .. start + batch - 1 of one state zset, each
-- job with its member, score and every field kept; members already in
-- layout 3 are left alone, so a re-run after a crash redoes nothing.
--
-- A converted member keeps its score and sorts before every 20-digit one
-- of that score, so no member at a rank past the window moves: the caller
-- walks the zset by rank, window after window (minus dropped members).
--
-- KEYS[1]  pl:{queue}:p{N}:{state}    the state's zset
-- KEYS[2]  pl:{queue}:p{N}:jobs       jobs hash (layout 3)
-- KEYS[3]  pl:{queue}:p{N}:j:         prefix of the layout-2 job hashes
-- ARGV[1]  start rank (>= 0)
-- ARGV[2]  batch (>= 1)
-- Returns: {members seen, converted, dropped (a member without its job
--          hash, which the scripts never leave: removed, as dequeue did)}
local start = tonumber(ARGV[1])
local batch = tonumber(ARGV[2])
if not start or start < 0 or not batch or batch < 1 then return bad('upgrade_v3: bad arguments') end
local rows = redis.call('ZRANGE', KEYS[1], start, start + batch - 1, 'WITHSCORES')
local converted, dropped = 0, 0
local function clamp(n, max)
  return math.min(math.max(n or 0, 0), max)
end
for i = 1, #rows, 2 do
  local old = rows[i]
  if #old == 20 and string.match(old, '^%d+$') then
    local id = tonumber(old)
    local k = KEYS[3] .. int(id)
    local f = redis.call('HMGET', k, 'state', 'attempts_allowed', 'attempts_remaining', 'custom_status',
      'created_at', 'run_after', 'updated_at', 'claim', 'body')
    redis.call('ZREM', KEYS[1], old)
    if f[1] then
      local m = member_of(id)
      local job = {
        state = clamp(tonumber(f[1]), 3),
        allowed = clamp(tonumber(f[2]), MAX_U16),
        left = clamp(tonumber(f[3]), MAX_U16),
        status = f[4] or '',
        created = clamp(tonumber(f[5]), MAX_TIME),
        run_after = clamp(tonumber(f[6]), MAX_TIME),
        updated = clamp(tonumber(f[7]), MAX_TIME),
        claim = f[8] or nil,
      }
      redis.call('HSET', KEYS[2], m, job_value(job, f[9] or ''))
      redis.call('ZADD', KEYS[1], rows[i + 1], m)
      redis.call('DEL', k)
      converted = converted + 1
    else
      dropped = dropped + 1
    end
  end
end
return {#rows / 2, converted, dropped}
