-- rate_release: give back unused whole tokens to one or more buckets,
-- never above burst. A missing bucket counts as full, so there is nothing
-- to give back to. Keeps the refill timestamps and the keys' TTLs.
--
-- KEYS[k]  plc:rate:{bucket}          hash: tokens, ts (ms)
-- ARGV[1]  burst
-- ARGV[1+k] count (>= 0) for KEYS[k]
-- Returns: how many buckets got tokens back.
local burst = tonumber(ARGV[1])
if not burst or #ARGV ~= #KEYS + 1 then return redis.error_reply('pinlater: rate_release: bad arguments') end
local n = 0
for k, key in ipairs(KEYS) do
  local count = tonumber(ARGV[k + 1])
  if not count then return redis.error_reply('pinlater: rate_release: bad arguments') end
  local tokens = count > 0 and tonumber(redis.call('HGET', key, 'tokens'))
  if tokens then
    redis.call('HSET', key, 'tokens', string.format('%.17g', math.min(burst, tokens + count)))
    n = n + 1
  end
end
return n
