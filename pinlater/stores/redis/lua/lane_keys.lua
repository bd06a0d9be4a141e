-- lane_keys: the fairness keys whose lanes a dequeue of `limit` jobs
-- serves first, over the priorities in order, until `limit` keys are
-- found: per priority that keeps lanes, the lanes in turn that have a due
-- job (a lane served empty stays in turn until a dequeue meets it), then
-- the waiting lanes that came due (a dequeue puts them in turn after). A call
-- looks at 4 * limit + 16 lanes in turn at most, over all priorities, so
-- that its cost is that of its limit however many priorities and empty
-- lanes the queue has. Read only; the caller gets these keys' allowances
-- before it dequeues (per-key limits), and reads more if the dequeue meets
-- a lane it has none for.
--
-- KEYS[k]  pl:{queue}:p{N}:pending   per priority, in the order served
-- ARGV[1]  limit (>= 1)
-- Returns: the keys, each once, lane '' left out.
local limit = tonumber(ARGV[1])
if not limit or limit < 1 then return bad('lane_keys: bad limit') end
local now = now_ms()
local seen, out = {}, {}
local function add(lane)
  if lane ~= '' and not seen[lane] then
    seen[lane] = true
    out[#out + 1] = lane
  end
end
local looks = 4 * limit + 16
for _, pending in ipairs(KEYS) do
  if #out >= limit or looks <= 0 then break end
  if lanes_on(pending) then
    local base = base_of(pending)
    local turns = redis.call('LRANGE', base .. 'turns', 0, looks - 1)
    looks = looks - #turns
    for _, lane in ipairs(turns) do
      if #out >= limit then break end
      if lane ~= '' and #redis.call('ZRANGEBYSCORE', base .. 'lane:' .. lane, '-inf', int(now), 'LIMIT', 0, 1) > 0 then
        add(lane)
      end
    end
    if #out < limit then
      for _, lane in ipairs(redis.call('ZRANGEBYSCORE', base .. 'waits', '-inf', int(now), 'LIMIT', 0, limit - #out)) do
        add(lane)
      end
    end
  end
end
return out
