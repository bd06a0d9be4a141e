-- layout: the layout version a store records (pinlater.stores.layout).
-- A store holding no data yet is new: it gets the version ARGV[1] names.
--
-- KEYS[1]  the version record: pl:layout (shard) or plc:layout (control)
-- KEYS[2]  a key every store holding data has: pl:queues or plc:queues
-- ARGV[1]  the version to record on a new store, or '' to only read
-- Returns: the recorded version; 1 for data without a record (written
-- before versions were recorded); 0 for a new store left unrecorded.
local recorded = redis.call('GET', KEYS[1])
if recorded then return tonumber(recorded) end
if redis.call('EXISTS', KEYS[2]) == 1 then return 1 end
if ARGV[1] == '' then return 0 end
redis.call('SET', KEYS[1], ARGV[1])
return tonumber(ARGV[1])
