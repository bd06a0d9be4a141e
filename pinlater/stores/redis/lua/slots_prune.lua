-- slots_prune: free the named slots taken before `before` (server ms),
-- and only those: a lease stamped since (its job claimed again and bound
-- anew) stays. The monitor's reconciliation (pinlater/engine/slots.py)
-- prunes leases whose jobs it found no longer running, and reservations
-- never bound.
--
-- KEYS[1]  plc:slots:{queue}          zset member -> ms taken
-- ARGV[1]  before (ms)
-- ARGV[2..] members
-- Returns: how many were freed.
local before = tonumber(ARGV[1])
if not before then return redis.error_reply('pinlater: slots_prune: bad arguments') end
local freed = 0
for i = 2, #ARGV do
  local at = tonumber(redis.call('ZSCORE', KEYS[1], ARGV[i]))
  if at and at < before then
    redis.call('ZREM', KEYS[1], ARGV[i])
    freed = freed + 1
  end
end
return freed
