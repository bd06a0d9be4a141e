-- rate_release: give back unused whole tokens, never above burst. A missing
-- bucket counts as full, so there is nothing to give back to. Keeps the
-- refill timestamp and the key's TTL.
--
-- KEYS[1]  plc:rate:{bucket}          hash: tokens, ts (ms)
-- ARGV[1]  count (>= 0)
-- ARGV[2]  burst
-- Returns: 1 if tokens were returned, else 0.
local count = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
if not count or not burst then return redis.error_reply('pinlater: rate_release: bad arguments') end
if count <= 0 then return 0 end
local tokens = tonumber(redis.call('HGET', KEYS[1], 'tokens'))
if not tokens then return 0 end
redis.call('HSET', KEYS[1], 'tokens', string.format('%.17g', math.min(burst, tokens + count)))
return 1
