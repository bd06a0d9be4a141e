-- _prelude.lua: helpers shared by every job script. The loader
-- (pinlater/backends/redis_scripts.py) prepends this file to each script
-- before registering it, so Redis error line numbers are offset by this
-- file's length. Only `local` definitions: Redis forbids globals.

-- The shard's clock in ms. TIME is allowed in Redis 7 scripts because
-- effects (not the script) are replicated.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Integers as decimal strings: Lua's tostring uses %.14g and would switch
-- to exponent notation for large values.
local function int(n)
  return string.format('%d', n)
end

-- Zset members are ids zero-padded to 20 digits; job hash keys use the
-- plain id: <prefix passed in KEYS> .. id. Deriving per-job keys from a
-- prefix in KEYS is how every script reaches job hashes (standalone Redis,
-- one shard per server/db, so no cluster slot rules apply).
local function job_key(prefix, member)
  return prefix .. string.match(member, '^0*(%d+)$')
end

local function id_key(prefix, id)
  return prefix .. int(id)
end

local function member_of(id)
  return string.format('%020d', id)
end

-- Any integer: ids below 1 never exist, so such an item is simply stale.
local function valid_id(id)
  return type(id) == 'number' and id == math.floor(id)
end

local function valid_member(m)
  return m ~= nil and #m == 20 and string.match(m, '^%d+$') ~= nil
end

-- Batch items arrive as one JSON array (cjson is built into Redis): far
-- fewer arguments to pack and parse than one ARGV per field. JSON null
-- decodes to cjson.null.
local function opt(v)
  if v == nil or v == cjson.null then return nil end
  return v
end

local function is_int(v)
  return type(v) == 'number' and v == math.floor(v)
end

-- Many members in few calls; unpack is bounded by the Lua C stack, hence
-- chunks. `flat` is {score, member, ...} for zadd_many.
local function zadd_many(key, flat)
  for i = 1, #flat, 1000 do
    redis.call('ZADD', key, unpack(flat, i, math.min(i + 999, #flat)))
  end
end

local function zrem_many(key, members)
  for i = 1, #members, 1000 do
    redis.call('ZREM', key, unpack(members, i, math.min(i + 999, #members)))
  end
end

-- claim = TOKEN(16 hex) .. '@' .. source; the caller's source must match.
local function claim_source(claim)
  if not claim then return nil end
  return string.sub(claim, 18)
end

-- custom_status is capped in characters. In UTF-8, a character starts at
-- every byte that is not a continuation byte (0x80..0xBF).
local function is_char_start(s, i)
  local b = string.byte(s, i)
  return b < 0x80 or b >= 0xC0
end

-- Keep the newest (rightmost) `max` characters.
local function cap_right(s, max)
  if #s <= max then return s end
  if max <= 0 then return '' end
  local n = 0
  for i = #s, 1, -1 do
    if is_char_start(s, i) then
      n = n + 1
      if n == max then return string.sub(s, i) end
    end
  end
  return s
end

-- Keep the oldest (leftmost) `max` characters.
local function cap_left(s, max)
  if #s <= max then return s end
  local n = 0
  for i = 1, #s do
    if is_char_start(s, i) then
      n = n + 1
      if n > max then return string.sub(s, 1, i - 1) end
    end
  end
  return s
end

local function bad(msg)
  return redis.error_reply('pinlater: ' .. msg)
end
