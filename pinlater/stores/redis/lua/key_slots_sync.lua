-- key_slots_sync: one process's step on a queue's per-key slots (see
-- pinlater/engine/key_slots.py): the slots of a queue with a
-- key_max_running, counted per owner (the process; its claims' tokens
-- start with its name) and fairness key. In one step: free slots of jobs
-- whose claims ended, then take up to `want` more per key for the owner,
-- never holding more than `cap` of a key in all; the owner's stamp is the
-- server's clock (0 when it leaves, so the monitor settles it at once).
-- Fields are kept only while above 0, so the hash holds about the jobs
-- running, whatever the number of keys the queue has seen.
--
-- KEYS[1]  plc:kheld:{queue}    hash OWNER\0KEY -> held, '#\0'KEY -> the
--                               key's total, OWNER\0 -> the owner's total
-- KEYS[2]  plc:ksynced:{queue}  zset OWNER -> ms last synced
-- ARGV[1]  cap (>= 1)
-- ARGV[2]  owner
-- ARGV[3]  1 if the owner leaves, else 0
-- ARGV[4]  f, then f triples: owner, key, slots to free
-- ARGV[5+3f..] pairs: key, slots wanted
-- Returns: the slots granted per wanted key, in order.
local cap, owner, leaving = tonumber(ARGV[1]), ARGV[2], ARGV[3] == '1'
local f = tonumber(ARGV[4])
if not cap or cap < 1 or #owner < 1 or not f or f < 0 or (#ARGV - 4 - 3 * f) % 2 ~= 0 then
  return redis.error_reply('pinlater: key_slots_sync: bad arguments')
end
local function get(field) return tonumber(redis.call('HGET', KEYS[1], field)) or 0 end
local function add(field, d)
  local v = get(field) + d
  if v > 0 then redis.call('HSET', KEYS[1], field, v) else redis.call('HDEL', KEYS[1], field) end
end
for i = 5, 4 + 3 * f, 3 do
  local o, k, n = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2])
  if not n or n < 0 then return redis.error_reply('pinlater: key_slots_sync: bad free') end
  local d = math.min(n, get(o .. '\0' .. k))
  if d > 0 then
    add(o .. '\0' .. k, -d)
    add('#\0' .. k, -d)
    add(o .. '\0', -d)
  end
end
local out = {}
for i = 5 + 3 * f, #ARGV, 2 do
  local k, w = ARGV[i], tonumber(ARGV[i + 1])
  if not w or w < 0 then return redis.error_reply('pinlater: key_slots_sync: bad want') end
  local g = math.max(0, math.min(w, cap - get('#\0' .. k)))
  if g > 0 then
    add(owner .. '\0' .. k, g)
    add('#\0' .. k, g)
    add(owner .. '\0', g)
  end
  out[#out + 1] = g
end
local t = redis.call('TIME')
redis.call('ZADD', KEYS[2], leaving and 0 or (tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)), owner)
return out
