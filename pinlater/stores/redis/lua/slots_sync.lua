-- slots_sync: one process's step on a capped queue's slots (see
-- pinlater/engine/slots.py). The slots are counted per owner, the process
-- that holds them (its claims' tokens start with its name); '#' is the
-- total. In one step: free slots of jobs other owners claimed whose claims
-- ended here, give back some of the owner's own, then take up to `want`
-- more, never holding more than `cap` in all; the owner's stamp is the
-- server's clock (0 when it leaves, so the monitor settles what it held
-- at once). Owners holding nothing stay known until the monitor settles
-- them as gone, so that a process's first step can see that its owner's
-- name (random) is taken, and draw another. An owner with stamp 0 (left,
-- or settled) is the monitor's: a free of its slots is not applied, since
-- the monitor's count of its jobs may already leave that job out; it
-- settles the owner to the jobs it runs at every pass.
--
-- KEYS[1]  plc:held:{queue}          hash '#' -> total, OWNER -> held
-- KEYS[2]  plc:synced:{queue}        zset OWNER -> ms last synced
-- ARGV[1]  cap (>= 1)
-- ARGV[2]  owner
-- ARGV[3]  want (>= 0)
-- ARGV[4]  give back (>= 0)
-- ARGV[5]  1 if the owner leaves, 2 if this is its first step, else 0
-- ARGV[6..] pairs: another owner, how many of its slots to free
-- Returns: {granted, the owner's held count now}, or {-1, 0} if this is
-- the owner's first step and its name is known: nothing is changed.
local cap, owner = tonumber(ARGV[1]), ARGV[2]
local want, give, leaving = tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5] == '1'
if not cap or cap < 1 or not want or want < 0 or not give or give < 0 or #owner < 1 or #ARGV % 2 ~= 1 then
  return redis.error_reply('pinlater: slots_sync: bad arguments')
end
if ARGV[5] == '2' and (redis.call('HEXISTS', KEYS[1], owner) == 1 or redis.call('ZSCORE', KEYS[2], owner)) then
  return {-1, 0}
end
local t = redis.call('TIME')
local now = string.format('%d', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
local total = tonumber(redis.call('HGET', KEYS[1], '#')) or 0

local function set(o, held, stamp)
  redis.call('HSET', KEYS[1], o, held)
  if stamp then redis.call('ZADD', KEYS[2], stamp, o) end
end

for i = 6, #ARGV, 2 do
  local o, n = ARGV[i], tonumber(ARGV[i + 1])
  if not n or n < 0 then return redis.error_reply('pinlater: slots_sync: bad free') end
  local held = tonumber(redis.call('HGET', KEYS[1], o)) or 0
  local d = math.min(n, held)
  if d > 0 and redis.call('ZSCORE', KEYS[2], o) ~= '0' then
    total = total - d
    set(o, held - d, nil)
  end
end
local held = tonumber(redis.call('HGET', KEYS[1], owner)) or 0
local g = math.min(give, held)
held, total = held - g, total - g
local grant = math.max(0, math.min(want, cap - total))
held, total = held + grant, total + grant
set(owner, held, leaving and '0' or now)
redis.call('HSET', KEYS[1], '#', total)
return {grant, held}
