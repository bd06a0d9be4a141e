-- slots_add: leases for running jobs that hold none (the monitor found
-- them running without one: a cap set on a busy queue, a lease lost with
-- a control store's last writes). Stamped with the server's ms; a member
-- already held keeps its stamp. May take the count above the cap: it is
-- the truth about jobs already running, and new dequeues wait for it.
--
-- KEYS[1]  plc:slots:{queue}          zset member -> ms taken
-- ARGV[1..] members
-- Returns: how many were added.
if #ARGV == 0 then return 0 end
local t = redis.call('TIME')
local now = string.format('%d', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
local added = 0
for i = 1, #ARGV do
  added = added + redis.call('ZADD', KEYS[1], 'NX', now, ARGV[i])
end
return added
