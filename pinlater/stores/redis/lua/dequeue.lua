-- dequeue: PENDING with run_after <= now -> RUNNING under one new claim,
-- over several priorities in the order given, at most `limit` in all;
-- within a priority oldest run_after first, then lowest id (zset order:
-- score, then member, and members order as their ids), or, in a priority
-- that keeps lanes (the prelude's fair service), lane by lane in turn and
-- within a lane in that order. With an empty claim it is a peek: nothing
-- changed, the jobs a dequeue would take without lanes. Then, if fewer than `limit`
-- were found, the first look-ahead priority with a runnable job, so that
-- one call per shard serves every priority (pinlater/engine/priority_walk.py).
--
-- KEYS[3g-2]  pl:{queue}:p{N}:pending    of claim group g (g = 1..n)
-- KEYS[3g-1]  pl:{queue}:p{N}:running
-- KEYS[3g]    pl:{queue}:p{N}:jobs       jobs hash
-- KEYS[3n+k]  pl:{queue}:p{M}:pending    of look-ahead priority k
-- ARGV[1]     limit (>= 1)
-- ARGV[2]     claim 'TOKEN@source' (TOKEN: 16 lowercase hex, new per call), '' to peek
-- ARGV[3]     '1': the claimed jobs enter their running zset's owners index
--             (the prelude's owners_of), those bigger than OWNERS_INDEX_MIN,
--             for a queue whose running jobs are counted (a cap); '' not
-- ARGV[4]     n, then ARGV[5..4+n] the claim groups' priorities and
--             ARGV[5+n..] the look-ahead priorities (one per look-ahead key)
-- ARGV[...]   then, for per-key limits only: 'allow', and pairs: fairness
--             key, how many more jobs it may start (see claim_by_lanes)
-- Returns: {next priority or 0, or -1: the call met LANE_WASTE lanes
--           without a job and stopped, so the caller may call again; the
--           key that ended the call with allowances ('' if none), then per
--           job: priority, id, body, attempts_allowed, attempts_remaining,
--           trace ('' if none), run_after, key ('' if none)}
local limit = tonumber(ARGV[1])
if not limit or limit < 1 then return bad('dequeue: bad limit') end
local claim = ARGV[2]
local indexed = ARGV[3] == '1'
local n = tonumber(ARGV[4])
if not n or n < 1 or #KEYS < 3 * n then return bad('dequeue: bad groups') end
local fixed = 4 + n + (#KEYS - 3 * n)
local allow = nil
if #ARGV > fixed then
  if ARGV[fixed + 1] ~= 'allow' or (#ARGV - fixed - 1) % 2 ~= 0 then return bad('dequeue: bad allowances') end
  allow = {}
  for i = fixed + 2, #ARGV, 2 do
    local a = tonumber(ARGV[i + 1])
    if not a or a < 0 then return bad('dequeue: bad allowance') end
    allow[ARGV[i]] = a
  end
elseif #ARGV ~= fixed then
  return bad('dequeue: bad groups')
end
local now = now_ms()
local now_s = int(now)  -- the score of every job claimed: formatted once, not per job
local out = {0, ''}
local left = limit

-- The owners index's entry of a job claimed by this call (most have no
-- key, so that one is made once).
local plain_mark = owner_mark(claim, '')
local function mark_of(key)
  if key == '' then return plain_mark end
  return owner_mark(claim, key)
end

local function put(priority, m, j, body)
  out[#out + 1] = priority
  out[#out + 1] = id_of(m)
  out[#out + 1] = body
  out[#out + 1] = j.allowed
  out[#out + 1] = j.left
  out[#out + 1] = j.trace
  out[#out + 1] = j.run_after
  out[#out + 1] = j.key
end

-- Lanes that came due since the last dequeue join the turns, at most this
-- many beyond the limit per call (the rest at the next), so that a call's
-- cost does not grow with the number of keys.
local PROMOTE = 100

-- Lanes met without a job taken (empty ones leaving, ones whose first job
-- is not due) that end a call: each costs a few calls, and a priority can
-- hold any number of them (every job of 200,000 keys deleted: their lanes
-- leave only when met, and one call met them all in 740 ms), so one call
-- must not meet them all.
local LANE_WASTE = 1000
local wasted = 0

-- Up to `want` jobs of a priority that keeps lanes; how many it took, and
-- the key that ended the call (nil if none did).
-- The first lanes of the turns come off in one LPOP and are served in
-- that order, each put last again in one RPUSH after them: the order
-- one-job-at-a-time would give. A lane served goes last whatever it has
-- left; a keyed one met empty at its turn leaves, one whose first job is
-- not due then goes to waits; lane '' without a due job goes back first.
-- So a keyed job costs one ZPOPMIN of its lane, and a job without a key
-- the prelude's plain_head and one ZREM. The claimed keyed jobs leave
-- pending and the keyed index in one ZREM each, and all are read and
-- written in one HMGET and one HSET at the end. Once no keyed lane is
-- left the lanes end.
local function claim_by_lanes(pending, running, jobs, priority, want)
  local base = base_of(pending)
  local turns, inturn, waits = base .. 'turns', base .. 'inturn', base .. 'waits'
  local keyed, keyed_taken, entries, plain_from, plain_none = base .. 'keyed', {}, {}, 0, false
  local due = redis.call('ZRANGEBYSCORE', waits, '-inf', now_s, 'LIMIT', 0, want + PROMOTE)
  if #due > 0 then
    zrem_many(waits, due)
    call_many('RPUSH', turns, due)
    call_many('SADD', inturn, due)
  end
  local taken, lane_of = {}, base .. 'lane:'
  -- With allowances (pinlater/stores/memory/lanes.py states the rules): a
  -- keyed lane with a due job whose key has none left goes last without a
  -- job (it loses the turn it cannot use); one whose key has no
  -- allowance, or that lost its turn already since the last job taken
  -- (every lane in turn has), ends the call keeping its turn.
  -- passed: the lanes that lost their turn since the last job taken (only
  -- with allowances), emptied only when something is in it; pads: the
  -- keyed index's run_after part by the score's text, made once per
  -- distinct run_after (the jobs of one call mostly share a few). Both
  -- spare this loop work per job: it is most of what a key costs.
  local passed, passed_any, stop, pads = {}, false, nil, {}
  while #taken < want and not stop and wasted < LANE_WASTE do
    -- One more than still wanted: lane '' may be among them without a due job.
    local lanes = redis.call('LPOP', turns, want - #taken + 1)
    if not lanes then break end
    local before, spared = #taken, 0
    local again, gone, plain_waits, unserved = {}, {}, false, {}
    for _, lane in ipairs(lanes) do
      local left = allow and allow[lane]
      if #taken >= want or stop then
        unserved[#unserved + 1] = lane
      elseif lane == '' and plain_none then
        -- Known without a due job since earlier in this call: no search,
        -- and no waste.
        plain_waits = true
        spared = spared + 1
      elseif lane == '' then
        local m, rank = plain_head(pending, plain_from, now)
        if m then
          -- Out of pending at once, so the next search starts where it is.
          redis.call('ZREM', pending, m)
          plain_from = rank
          taken[#taken + 1] = m
          again[#again + 1] = lane
          if passed_any then passed, passed_any = {}, false end
        else
          plain_none = true
          plain_waits = true
        end
      else
        local head = redis.call('ZPOPMIN', lane_of .. lane)
        local due = #head > 0 and tonumber(head[2]) <= now
        if due and allow and (left == nil or passed[lane]) then
          redis.call('ZADD', lane_of .. lane, head[2], head[1])
          stop = lane
          unserved[#unserved + 1] = lane
        elseif due and left and left <= 0 then
          redis.call('ZADD', lane_of .. lane, head[2], head[1])
          passed[lane], passed_any = true, true
          again[#again + 1] = lane
          spared = spared + 1  -- keys of the allowances: a few per job asked for
        elseif due then
          taken[#taken + 1] = head[1]
          keyed_taken[#keyed_taken + 1] = head[1]
          local pad = pads[head[2]]
          if not pad then
            pad = keyed_entry(tonumber(head[2]), '')
            pads[head[2]] = pad
          end
          entries[#entries + 1] = pad .. head[1]
          again[#again + 1] = lane
          if left then allow[lane] = left - 1 end
          if passed_any then passed, passed_any = {}, false end
        else
          if #head > 0 then
            redis.call('ZADD', lane_of .. lane, head[2], head[1])
            redis.call('ZADD', waits, head[2], lane)
          end
          gone[#gone + 1] = lane
        end
      end
    end
    if #gone > 0 then call_many('SREM', inturn, gone) end
    if #again > 0 then call_many('RPUSH', turns, again) end
    for i = #unserved, 1, -1 do redis.call('LPUSH', turns, unserved[i]) end
    if plain_waits then redis.call('LPUSH', turns, '') end
    wasted = wasted + #lanes - #unserved - (#taken - before) - spared
    if #again == 0 and #gone == 0 then break end  -- only lane '', without a due job
  end
  zrem_many(pending, keyed_taken)
  zrem_many(keyed, entries)
  if redis.call('EXISTS', inturn, waits) == 0 then
    redis.call('DEL', turns, keyed)
  end
  if #taken == 0 then return 0, stop end
  local values = hmget_many(jobs, taken)
  local run, rows, marks, got = {}, {}, {}, 0
  for i, m in ipairs(taken) do
    local v = values[i]
    local j = v and read_job(v)
    -- A lane's member is a pending job: every way out of pending takes it
    -- out of its lane too. Should one not be, it is dropped, not claimed.
    if j and j.state == 0 then
      local body = body_of(v, j)
      j.state, j.claim, j.updated = 1, claim, now
      rows[#rows + 1] = m
      rows[#rows + 1] = job_value(j, body)
      run[#run + 1] = now_s
      run[#run + 1] = m
      if indexed and #v > OWNERS_INDEX_MIN then
        marks[#marks + 1] = m
        marks[#marks + 1] = mark_of(j.key)
      end
      put(priority, m, j, body)
      got = got + 1
    end
  end
  hset_many(jobs, rows)
  zadd_many(running, run)
  hset_many(owners_of(running), marks)
  return got, stop
end

for g = 1, n do
  local pending, running, jobs = KEYS[3 * g - 2], KEYS[3 * g - 1], KEYS[3 * g]
  local priority = tonumber(ARGV[4 + g])
  if claim ~= '' and lanes_on(pending) then
    local took, stopped = claim_by_lanes(pending, running, jobs, priority, left)
    left = left - took
    if stopped then out[2] = stopped end
    if left <= 0 or stopped then return out end
    if wasted >= LANE_WASTE then
      out[1] = -1
      return out
    end
  else
    local members = redis.call('ZRANGEBYSCORE', pending, '-inf', now_s, 'LIMIT', 0, left)
    if #members > 0 then
      -- They are exactly the first #members by rank.
      if claim ~= '' then redis.call('ZREMRANGEBYRANK', pending, 0, #members - 1) end
      local values = hmget_many(jobs, members)
      local run, rows, marks = {}, {}, {}
      for i, m in ipairs(members) do
        local v = values[i]
        -- A member without its job cannot happen through these scripts; drop
        -- it rather than make up a job.
        if v then
          local j = read_job(v)
          local body = body_of(v, j)
          if claim ~= '' then
            j.state, j.claim, j.updated = 1, claim, now
            rows[#rows + 1] = m
            rows[#rows + 1] = job_value(j, body)
            run[#run + 1] = now_s
            run[#run + 1] = m
            if indexed and #v > OWNERS_INDEX_MIN then
              marks[#marks + 1] = m
              marks[#marks + 1] = mark_of(j.key)
            end
          end
          put(priority, m, j, body)
        end
      end
      hset_many(jobs, rows)
      zadd_many(running, run)
      hset_many(owners_of(running), marks)
      left = left - #members
      if left <= 0 then return out end
    end
  end
end
for k = 3 * n + 1, #KEYS do
  if #redis.call('ZRANGEBYSCORE', KEYS[k], '-inf', now_s, 'LIMIT', 0, 1) > 0 then
    out[1] = tonumber(ARGV[k - 2 * n + 4])
    return out
  end
end
return out
