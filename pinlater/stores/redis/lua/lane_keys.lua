-- lane_keys: the fairness keys whose lanes a dequeue of `limit` jobs
-- serves first, per priority that keeps lanes: the first `limit` lanes in
-- turn that have a due job (among the first 4 * limit + 16: a lane served
-- empty stays in turn until a dequeue meets it), and the first `limit`
-- waiting lanes that came due (a dequeue puts them in turn first). Read
-- only; the caller gets these keys' allowances before it dequeues
-- (per-key limits).
--
-- KEYS[k]  pl:{queue}:p{N}:pending   per priority
-- ARGV[1]  limit (>= 1)
-- Returns: the keys, each once, lane '' left out.
local limit = tonumber(ARGV[1])
if not limit or limit < 1 then return bad('lane_keys: bad limit') end
local now = now_ms()
local seen, out = {}, {}
local function add(lanes)
  for _, lane in ipairs(lanes) do
    if lane ~= '' and not seen[lane] then
      seen[lane] = true
      out[#out + 1] = lane
    end
  end
end
for _, pending in ipairs(KEYS) do
  if lanes_on(pending) then
    local base = base_of(pending)
    add(redis.call('ZRANGEBYSCORE', base .. 'waits', '-inf', int(now), 'LIMIT', 0, limit))
    local due, found = {}, 0
    for _, lane in ipairs(redis.call('LRANGE', base .. 'turns', 0, 4 * limit + 15)) do
      if found >= limit then break end
      if lane ~= '' and #redis.call('ZRANGEBYSCORE', base .. 'lane:' .. lane, '-inf', int(now), 'LIMIT', 0, 1) > 0 then
        due[#due + 1] = lane
        found = found + 1
      end
    end
    add(due)
  end
end
return out
