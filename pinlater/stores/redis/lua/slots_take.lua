-- slots_take: reserve up to `wanted` of a queue's concurrency slots, never
-- holding more than `cap` in all. Every slot held is one member of the
-- queue's slot zset (score: the server's ms when taken), so the count held
-- is ZCARD and the check-and-take is atomic across every process. The
-- reservations are members TOKEN:1..TOKEN:n (pinlater/engine/slots.py
-- swaps them for the claimed jobs with slots_bind). Slots named after the
-- token are freed first: a dequeue's riding ACKs free theirs in this call.
--
-- KEYS[1]  plc:slots:{queue}          zset member -> ms taken
-- ARGV[1]  cap (>= 1)
-- ARGV[2]  wanted (>= 0)
-- ARGV[3]  token ('~' and 16 hex digits, new per call)
-- ARGV[4..] slots to free first (jobs whose claims ended)
-- Returns: n, the slots reserved (0..wanted).
local cap = tonumber(ARGV[1])
local wanted = tonumber(ARGV[2])
local token = ARGV[3]
if not cap or not wanted or cap < 1 or wanted < 0 or type(token) ~= 'string' or #token < 2 then
  return redis.error_reply('pinlater: slots_take: bad arguments')
end
for i = 4, #ARGV, 1000 do
  redis.call('ZREM', KEYS[1], unpack(ARGV, i, math.min(i + 999, #ARGV)))
end
local n = math.min(wanted, cap - redis.call('ZCARD', KEYS[1]))
if n <= 0 then return 0 end
local t = redis.call('TIME')
local now = string.format('%d', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
local args = {}
for i = 1, n do
  args[#args + 1] = now
  args[#args + 1] = token .. ':' .. i
end
redis.call('ZADD', KEYS[1], unpack(args))
return n
