-- slots_bind: swap a dequeue's reservations (TOKEN:1..TOKEN:reserved) for
-- leases named after the jobs it claimed (at most `reserved` of them),
-- stamped with the server's ms, in one step: the count held never drops
-- below the jobs running, and a slot not used is freed.
--
-- KEYS[1]  plc:slots:{queue}          zset member -> ms taken
-- ARGV[1]  token
-- ARGV[2]  reserved (>= 0)
-- ARGV[3..] the jobs' lease members (SHARD:PRIORITY:ID)
-- Returns: the leases added.
local token = ARGV[1]
local reserved = tonumber(ARGV[2])
if type(token) ~= 'string' or #token < 2 or not reserved or reserved < 0 or #ARGV - 2 > reserved then
  return redis.error_reply('pinlater: slots_bind: bad arguments')
end
local gone = {}
for i = 1, reserved do gone[#gone + 1] = token .. ':' .. i end
for i = 1, #gone, 1000 do
  redis.call('ZREM', KEYS[1], unpack(gone, i, math.min(i + 999, #gone)))
end
if #ARGV == 2 then return 0 end
local t = redis.call('TIME')
local now = string.format('%d', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
local args = {}
for i = 3, #ARGV do
  args[#args + 1] = now
  args[#args + 1] = ARGV[i]
end
for i = 1, #args, 2000 do
  redis.call('ZADD', KEYS[1], unpack(args, i, math.min(i + 1999, #args)))
end
return #ARGV - 2
