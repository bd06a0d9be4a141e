-- batch_end: jobs' ends told to their batches (see
-- pinlater.stores.control.Batches): each end counted once, and a SEALED
-- batch whose last job this ends made COMPLETE in the same step. A few
-- calls per batch told, not per job: ACKs of a batch's jobs tell it often.
--
-- KEYS[1]  plc:batchof            hash: descriptor -> batch id
-- KEYS[2]  plc:batches            zset: batch id -> ms last changed
-- KEYS[3]  plc:batches:live       zset: the same, live batches
-- KEYS[4]  plc:batches:done       zset: the same, released and cancelled batches
-- ARGV[1]  the ends, one character per job: 'S' (succeeded) or 'F' (failed)
-- ARGV[2]  the jobs' descriptors, in the same order (each once), joined by
--          single spaces (a descriptor has none)
-- A batch's keys are plc:batch:{id} and plc:batch:{id}:jobs (batch_join.lua).
-- Returns: the ids of the batches this made COMPLETE.
-- A cancelled batch's ends are recorded too (it never completes), so a
-- cancel sent again goes over only its jobs that have not ended.
--
-- Two arguments however many jobs: an argument per job cost the caller
-- about as much to pack as this script's own work for the job.
if #ARGV ~= 2 then return redis.error_reply('pinlater: batch_end: bad arguments') end
local ends = ARGV[1]
local list = {}
for d in string.gmatch(ARGV[2], '[^ ]+') do list[#list + 1] = d end
local n = #list
if #ends ~= n or string.find(ends, '[^SF]') then return redis.error_reply('pinlater: batch_end: bad ends') end
if n == 0 then return {} end

-- `from`..`to` of `list`, HMGET of `key` in chunks (unpack is bounded by
-- the Lua C stack); the values in order, false for a missing field.
local function hmget(key, list, from, to)
  if to - from < 1000 then return redis.call('HMGET', key, unpack(list, from, to)) end
  local out = {}
  for i = from, to, 1000 do
    local got = redis.call('HMGET', key, unpack(list, i, math.min(i + 999, to)))
    for k = 1, #got do out[#out + 1] = got[k] end
  end
  return out
end

local owners = hmget(KEYS[1], list, 1, n)
local of, order = {}, {}
for i = 1, n do
  local b = owners[i]
  if b then
    local idx = of[b]
    if not idx then
      idx = {}
      of[b] = idx
      order[#order + 1] = b
    end
    idx[#idx + 1] = i
  end
end
local now
local done = {}
for _, b in ipairs(order) do
  local key = 'plc:batch:' .. b
  local state = redis.call('HGET', key, 'state')
  if state == 'open' or state == 'sealed' or state == 'cancelled' then
    local idx = of[b]
    local fields = {}
    for k = 1, #idx do fields[k] = list[idx[k]] end
    local known = hmget(key .. ':jobs', fields, 1, #fields)
    local sets, ok, failed = {}, 0, 0
    for k = 1, #idx do
      if known[k] == '' then
        sets[#sets + 1] = fields[k]
        if string.byte(ends, idx[k]) == 83 then  -- 'S'
          sets[#sets + 1] = 'S'
          ok = ok + 1
        else
          sets[#sets + 1] = 'F'
          failed = failed + 1
        end
      end
    end
    if #sets > 0 then
      for i = 1, #sets, 1000 do
        redis.call('HSET', key .. ':jobs', unpack(sets, i, math.min(i + 999, #sets)))
      end
      if not now then
        local t = redis.call('TIME')
        now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
      end
      if ok > 0 then redis.call('HINCRBY', key, 'ok', ok) end
      if failed > 0 then redis.call('HINCRBY', key, 'failed', failed) end
      redis.call('HSET', key, 'updated', now)
      redis.call('ZADD', KEYS[2], now, b)
      if state == 'cancelled' then
        redis.call('ZADD', KEYS[4], now, b)
      else
        redis.call('ZADD', KEYS[3], now, b)
      end
      if state == 'sealed' then
        local c = redis.call('HMGET', key, 'total', 'ok', 'failed')
        if tonumber(c[2] or 0) + tonumber(c[3] or 0) >= tonumber(c[1] or 0) then
          redis.call('HSET', key, 'state', 'complete')
          done[#done + 1] = b
        end
      end
    end
  end
end
return done
