-- batch_end: jobs' ends told to their batches (see
-- pinlater.stores.control.Batches): each end counted once, and a SEALED
-- batch whose last job this ends made COMPLETE in the same step. A few
-- calls per batch told, not per job: ACKs of a batch's jobs tell it often.
--
-- KEYS[1]  plc:batchof            hash: descriptor -> batch id
-- KEYS[2]  plc:batches            zset: batch id -> ms last changed
-- KEYS[3]  plc:batches:live       zset: the same, live batches
-- ARGV[1..] descriptor, end ('S' or 'F'), descriptor, end, ... (each descriptor once)
-- A batch's keys are plc:batch:{id} and plc:batch:{id}:jobs (batch_join.lua).
-- Returns: the ids of the batches this made COMPLETE.
local function hmget_all(key, fields)
  local out = {}
  for i = 1, #fields, 1000 do
    local got = redis.call('HMGET', key, unpack(fields, i, math.min(i + 999, #fields)))
    for k = 1, #got do out[#out + 1] = got[k] end
  end
  return out
end

local ds, ends = {}, {}
for i = 1, #ARGV - 1, 2 do
  if ARGV[i + 1] ~= 'S' and ARGV[i + 1] ~= 'F' then return redis.error_reply('pinlater: batch_end: bad end') end
  ds[#ds + 1] = ARGV[i]
  ends[#ends + 1] = ARGV[i + 1]
end
if #ds == 0 then return {} end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local owners = hmget_all(KEYS[1], ds)
local of, order = {}, {}
for i = 1, #ds do
  local b = owners[i]
  if b then
    if not of[b] then
      of[b] = {}
      order[#order + 1] = b
    end
    local list = of[b]
    list[#list + 1] = i
  end
end
local done = {}
for _, b in ipairs(order) do
  local key = 'plc:batch:' .. b
  local state = redis.call('HGET', key, 'state')
  if state == 'open' or state == 'sealed' then
    local idx = of[b]
    local fields = {}
    for k, i in ipairs(idx) do fields[k] = ds[i] end
    local known = hmget_all(key .. ':jobs', fields)
    local sets, ok, failed = {}, 0, 0
    for k, i in ipairs(idx) do
      if known[k] == '' then
        sets[#sets + 1] = ds[i]
        sets[#sets + 1] = ends[i]
        if ends[i] == 'S' then ok = ok + 1 else failed = failed + 1 end
      end
    end
    if #sets > 0 then
      for i = 1, #sets, 1000 do
        redis.call('HSET', key .. ':jobs', unpack(sets, i, math.min(i + 999, #sets)))
      end
      if ok > 0 then redis.call('HINCRBY', key, 'ok', ok) end
      if failed > 0 then redis.call('HINCRBY', key, 'failed', failed) end
      redis.call('HSET', key, 'updated', now)
      redis.call('ZADD', KEYS[2], now, b)
      redis.call('ZADD', KEYS[3], now, b)
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
