-- release: PENDING jobs without a fairness key that are due later become
-- due now (run_after = now); every other job is left as it is.
--
-- KEYS[1]  pl:{queue}:p{N}:pending
-- KEYS[2]  pl:{queue}:p{N}:jobs      jobs hash
-- ARGV[1..] members (see member_of)
-- Returns: per member, the job's state after (0..3), or -1: no such job.
for i = 1, #ARGV do
  if not valid_member(ARGV[i]) then return bad('release: bad member') end
end
local now = now_ms()
local out = {}
for i = 1, #ARGV do
  local m = ARGV[i]
  local j, v = load_job(KEYS[2], m)
  if not j then
    out[i] = -1
  else
    if j.state == 0 and j.key == '' and j.run_after > now then
      j.run_after = now
      save_job(KEYS[2], m, j, v)
      redis.call('ZADD', KEYS[1], int(now), m)
    end
    out[i] = j.state
  end
end
return out
