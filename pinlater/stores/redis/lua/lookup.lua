-- lookup: jobs of one priority by member, within a bound on the bodies it
-- brings (an unbounded lookup is one HMGET). Read-only, so atomic.
--
-- Each value is read on its own and kept only as far as the caller needs:
-- without bodies, cut where its body starts, so neither the script's memory
-- nor the reply ever holds the bodies of many jobs. With bodies, they are
-- summed as they are read; once past the bound, every job comes without
-- its body (withheld): the bodies kept so far are cut, the rest never kept.
--
-- KEYS[1]  pl:{queue}:p{N}:jobs       jobs hash
-- ARGV[1]  '1' to include bodies
-- ARGV[2]  with bodies: most body bytes to return in all
-- ARGV[3..] members, each once
-- Returns: {withheld (1 or 0), then per member its value or nil (the
--          format is in the prelude, decoded by record.py)}
local jobs = KEYS[1]
local with_body = ARGV[1] == '1'
local budget = tonumber(ARGV[2])
local out = {0}
local heads = {}  -- index in out -> where its body starts
local size = 0
for i = 3, #ARGV do
  local v = redis.call('HGET', jobs, ARGV[i])
  if v then
    local at = body_start(v)
    if with_body and budget then
      size = size + #v - at + 1
      if size > budget then
        for k, from in pairs(heads) do out[k] = string.sub(out[k], 1, from - 1) end
        out[1] = 1
        with_body = false
      end
    end
    if with_body then
      heads[#out + 1] = at
    else
      v = string.sub(v, 1, at - 1)
    end
  end
  out[#out + 1] = v or false
end
return out
