-- peek: what dequeue would return now, changing nothing (read-only; a
-- script so that "now" is the server's TIME and the read is atomic).
--
-- KEYS[1]  pl:{queue}:p{N}:pending
-- KEYS[2]  pl:{queue}:p{N}:j:        job hash prefix (job keys derived from it)
-- ARGV[1]  limit (>= 1)
-- Returns: flat list id, body, attempts_allowed, attempts_remaining, ...
local limit = tonumber(ARGV[1])
if not limit or limit < 1 then return bad('peek: bad limit') end
local now = now_ms()
local members = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', int(now), 'LIMIT', 0, limit)
local out = {}
for _, m in ipairs(members) do
  local f = redis.call('HMGET', job_key(KEYS[2], m), 'body', 'attempts_allowed', 'attempts_remaining')
  if f[1] then
    out[#out + 1] = tonumber(m)
    out[#out + 1] = f[1]
    out[#out + 1] = tonumber(f[2])
    out[#out + 1] = tonumber(f[3])
  end
end
return out
