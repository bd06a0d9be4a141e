-- rate_acquire: token buckets shared by every process, on the server's
-- clock, one or more in one step (a queue's, or the per-key buckets of
-- the keys a dequeue serves). Refill at `rate` tokens/s up to `burst`,
-- then take up to `wanted` whole tokens from each; fractional tokens stay
-- in the bucket. A missing bucket starts full. rate <= 0 grants nothing
-- and leaves the buckets alone.
--
-- A key expires after its bucket has been idle long enough to be full
-- again (at least ttl_min ms, at most 7 days: pinlater/stores/control.py's
-- bucket_idle_ms), so dead queues and keys do not leak keys and an expired
-- bucket restarting full is exactly what refilling would give.
--
-- KEYS[k]  plc:rate:{bucket}          hash: tokens, ts (ms)
-- ARGV[1]  wanted (>= 0), of each
-- ARGV[2]  rate, tokens per second
-- ARGV[3]  burst, bucket capacity
-- ARGV[4]  ttl_min ms
-- Returns: the whole tokens taken (0..wanted) from each bucket, in order.
local wanted = tonumber(ARGV[1])
local rate = tonumber(ARGV[2])
local burst = tonumber(ARGV[3])
local ttl_min = tonumber(ARGV[4])
if not wanted or not rate or not burst or not ttl_min then
  return redis.error_reply('pinlater: rate_acquire: bad arguments')
end
local out = {}
if rate <= 0 or wanted <= 0 then
  for k = 1, #KEYS do out[k] = 0 end
  return out
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
-- Capped at 7 days: beyond that a restart at full over-grants at most burst.
local ttl = string.format('%d', math.min(604800000, math.max(ttl_min, math.ceil(burst / rate * 1000))))
for k, key in ipairs(KEYS) do
  local f = redis.call('HMGET', key, 'tokens', 'ts')
  local tokens, ts = tonumber(f[1]), tonumber(f[2])
  if not tokens or not ts then
    tokens = burst
  else
    -- A clock step backwards refills nothing rather than draining.
    tokens = math.min(burst, tokens + math.max(0, now - ts) * rate / 1000)
  end
  local granted = math.min(wanted, math.floor(tokens))
  if granted < 0 then granted = 0 end
  tokens = tokens - granted
  -- %.17g: a double survives the round trip through the hash exactly.
  redis.call('HSET', key, 'tokens', string.format('%.17g', tokens), 'ts', string.format('%d', now))
  redis.call('PEXPIRE', key, ttl)
  out[k] = granted
end
return out
