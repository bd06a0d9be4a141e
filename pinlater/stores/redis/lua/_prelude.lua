-- _prelude.lua: helpers shared by every job script. The loader
-- (pinlater/stores/redis/scripts.py) prepends this file to each script
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

local floor = math.floor

-- Job ids as zset members and jobs-hash fields: one byte n (1..7), then the
-- id in n big-endian bytes, n as small as it can be. Byte order is numeric
-- order, so among equal scores Redis orders members by id; and a member of
-- an id below 2^40 fits jemalloc's smallest size class.
local function member_of(id)
  if id < 1 then return '\0' end  -- ids start at 1: no job has this member
  -- The usual sizes without a table (this runs for every item of an ACK).
  if id < 256 then return string.char(1, id) end
  if id < 65536 then return string.char(2, floor(id / 256), id % 256) end
  if id < 16777216 then
    return string.char(3, floor(id / 65536), floor(id / 256) % 256, id % 256)
  end
  local b, n = {}, 0
  while id > 0 do
    n = n + 1
    b[n] = id % 256
    id = floor(id / 256)
  end
  local out = {n}
  for i = n, 1, -1 do out[#out + 1] = b[i] end
  return string.char(unpack(out))
end

local function id_of(member)
  local id = 0
  for i = 2, #member do id = id * 256 + string.byte(member, i) end
  return id
end

local function valid_member(m)
  return m ~= nil and #m >= 2 and #m <= 8 and string.byte(m, 1) == #m - 1
end

-- Any integer: ids below 1 never exist, so such an item is simply stale.
local function valid_id(id)
  return type(id) == 'number' and id == math.floor(id)
end

-- A job is one field of its priority's jobs hash (KEYS name it), its value:
--   24-byte header  state + flags (1), attempts_allowed (2),
--                   attempts_remaining (2), created_at (6), updated_at (6),
--                   run_after (7): unsigned big-endian, times in ms
--   claim           if flag 4: length (2) + 'TOKEN@source' (RUNNING only)
--   custom status   if flag 8: length (2) + UTF-8 text
--   trace           if flag 16: length (1) + W3C traceparent (layout 4 on)
--   key             if flag 32: length (1) + the fairness key (layout 5 on)
--   body            the rest
-- pinlater/stores/redis/record.py reads the same format in Python.
local HEADER = 24

local MAX_U16 = 65535

local MAX_TIME = 9007199254740991  -- 2^53 - 1 (pinlater.limits.MAX_TIMESTAMP_MS)

local function u16(n)
  return string.char(floor(n / 256), n % 256)
end

local function u16_at(s, at)
  local hi, lo = string.byte(s, at, at + 1)
  return hi * 256 + lo
end

-- The header's fields to bytes and back. struct (built into Redis) packs
-- in C; the plain-Lua path is for servers without it (fakeredis in the
-- unit tests) and gives the same bytes. Only the path in use is defined:
-- every definition here costs a closure on each script call.
local pack_header, unpack_header
if type(struct) == 'table' then
  pack_header = function(flags, allowed, left, created, updated, run_after)
    return struct.pack('>BHHI6I6I7', flags, allowed, left, created, updated, run_after)
  end
  unpack_header = function(v)
    return struct.unpack('>BHHI6I6I7', v)
  end
else
  local function be(n, k)
    local b = {}
    for i = k, 1, -1 do
      b[i] = n % 256
      n = floor(n / 256)
    end
    return string.char(unpack(b))
  end
  local function from_be(s, at, k)
    local n = 0
    for i = at, at + k - 1 do n = n * 256 + string.byte(s, i) end
    return n
  end
  pack_header = function(flags, allowed, left, created, updated, run_after)
    return string.char(flags) .. be(allowed, 2) .. be(left, 2) .. be(created, 6) .. be(updated, 6)
      .. be(run_after, 7)
  end
  unpack_header = function(v)
    return string.byte(v, 1), from_be(v, 2, 2), from_be(v, 4, 2), from_be(v, 6, 6), from_be(v, 12, 6),
      from_be(v, 18, 7)
  end
end

-- The job in a table: state, allowed, left, created, updated, run_after,
-- claim (nil unless set), status ('' unless set), trace ('' unless set),
-- key ('' unless set), body_at (index of the body's first byte in v).
local function read_job(v)
  local flags, allowed, left, created, updated, run_after = unpack_header(v)
  local claim, status = nil, ''
  local at = HEADER + 1
  if flags % 8 >= 4 then
    local n = u16_at(v, at)
    claim = string.sub(v, at + 2, at + 1 + n)
    at = at + 2 + n
  end
  if flags % 16 >= 8 then
    local n = u16_at(v, at)
    status = string.sub(v, at + 2, at + 1 + n)
    at = at + 2 + n
  end
  local trace, key = '', ''
  if flags % 32 >= 16 then
    local n = string.byte(v, at)
    trace = string.sub(v, at + 1, at + n)
    at = at + 1 + n
  end
  if flags >= 32 then
    local n = string.byte(v, at)
    key = string.sub(v, at + 1, at + n)
    at = at + 1 + n
  end
  -- One constructor, so the table is made at its size at once.
  return {state = flags % 4, allowed = allowed, left = left, created = created, updated = updated,
    run_after = run_after, claim = claim, status = status, trace = trace, key = key, body_at = at}
end

-- read_job(v).body_at alone, for reads that only cut or measure bodies:
-- no header unpacked, no table made.
local function body_start(v)
  local flags = string.byte(v, 1)
  local at = HEADER + 1
  if flags % 8 >= 4 then at = at + 2 + u16_at(v, at) end
  if flags % 16 >= 8 then at = at + 2 + u16_at(v, at) end
  if flags % 32 >= 16 then at = at + 1 + string.byte(v, at) end
  if flags >= 32 then at = at + 1 + string.byte(v, at) end
  return at
end

-- The value of job j with this body (the claim is kept only while RUNNING).
local function job_value(j, body)
  local flags = j.state
  local claim, status = '', ''
  if j.state == 1 and j.claim and j.claim ~= '' then
    flags = flags + 4
    claim = u16(#j.claim) .. j.claim
  end
  if j.status ~= '' then
    flags = flags + 8
    status = u16(#j.status) .. j.status
  end
  local trace, key = '', ''
  if j.trace and j.trace ~= '' then
    flags = flags + 16
    trace = string.char(#j.trace) .. j.trace
  end
  if j.key and j.key ~= '' then
    flags = flags + 32
    key = string.char(#j.key) .. j.key
  end
  return pack_header(flags, j.allowed, j.left, j.created, j.updated, j.run_after) .. claim .. status .. trace
    .. key .. body
end

local function body_of(v, j)
  return string.sub(v, j.body_at)
end

-- The job of field m in the jobs hash, or nil.
local function load_job(jobs, m)
  local v = redis.call('HGET', jobs, m)
  if not v then return nil end
  return read_job(v), v
end

-- Store job j, keeping the body it had in v.
local function save_job(jobs, m, j, v)
  redis.call('HSET', jobs, m, job_value(j, body_of(v, j)))
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

-- One command over many arguments in few calls: unpack is bounded by the
-- Lua C stack, hence chunks (of an even size, so pairs stay together).
local function call_many(command, key, args)
  for i = 1, #args, 1000 do
    redis.call(command, key, unpack(args, i, math.min(i + 999, #args)))
  end
end

-- `flat` is {score, member, ...}.
local function zadd_many(key, flat) call_many('ZADD', key, flat) end

local function zrem_many(key, members) call_many('ZREM', key, members) end

-- `flat` is {field, value, ...}.
local function hset_many(key, flat) call_many('HSET', key, flat) end

local function hdel_many(key, fields) call_many('HDEL', key, fields) end

-- Batch items by priority group (it[1]): g -> item indexes, in item order.
-- Items of one group are read with one HMGET and written with one HSET; an
-- item for a job an earlier item of the batch already changed sees it
-- changed (`done` in the scripts), as if they ran one by one.
local function by_group(items)
  local groups = {}
  for i, it in ipairs(items) do
    local t = groups[it[1]]
    if not t then
      t = {}
      groups[it[1]] = t
    end
    t[#t + 1] = i
  end
  return groups
end

-- The jobs of many fields at once: {v or false, ...} in the fields' order.
local function hmget_many(key, fields)
  local out = {}
  for i = 1, #fields, 1000 do
    local got = redis.call('HMGET', key, unpack(fields, i, math.min(i + 999, #fields)))
    for k = 1, #got do out[#out + 1] = got[k] end
  end
  return out
end

-- Whether an ACK or checkpoint item holds RUNNING job j: `claim` (nil when
-- the item gives none) must be j's claim exactly; without one, any claim
-- of the item's `source` (pinlater/backends/base.py). A claim is
-- TOKEN(16 hex) .. '@' .. source.
local function holds(j, source, claim)
  if claim then return j.claim == claim end
  return j.claim ~= nil and string.sub(j.claim, 18) == source
end

-- A priority's owners index (pinlater/stores/redis/keys.py), named from
-- its running zset: RUNNING job's member -> its claim's token, a NUL, its
-- fairness key. running_owners counts a capped queue's claims from it on
-- every monitor pass; reading the jobs instead would copy every running
-- body. The dequeues of a queue with a cap write the entries of jobs bigger
-- than OWNERS_INDEX_MIN bytes, and every way out of RUNNING drops them; a
-- running job without one (a small one, or one claimed while its queue had
-- no cap) is read from its job. Small jobs cost less to read than to index.
local OWNERS_INDEX_MIN = 256

local function owners_of(running)
  return string.sub(running, 1, #running - 7) .. 'owners'  -- 'running' -> 'owners'
end

local function owner_mark(claim, key)
  return string.sub(claim, 1, 16) .. '\0' .. key
end

-- Jobs that left the running zset `running` leave its owners index: one
-- EXISTS for a queue that keeps none, not an HDEL of every member.
local function unindex(running, members)
  local owners = owners_of(running)
  if #members > 0 and redis.call('EXISTS', owners) == 1 then hdel_many(owners, members) end
end

-- An item's optional claim field: nil or a string.
local function valid_claim(c)
  return c == nil or type(c) == 'string'
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

-- Fair service between keys. A priority whose pending jobs have a key
-- serves them by "lane", one lane per key and lane '' for jobs without
-- one, taking lanes in turn (pinlater/stores/redis/keys.py names the keys).
-- Every pending job stays in the pending zset, so counts, scans, deletes
-- and the look ahead read it as before; the lanes only decide the order of
-- a dequeue. `base` is 'pl:{queue}:p{N}:', every key of the priority starts
-- with it, and keys built from it are in the priority's hash slot.
--   base..'turns'     list of lanes in turn, the next first; lane '' is in
--                     it for as long as lanes are kept
--   base..'inturn'    set of the keyed lanes in turns
--   base..'waits'     zset of keyed lanes whose first job was not due when
--                     met, score: its run_after
--   base..'lane:'..k  zset of the pending jobs of key k (score run_after)
--   base..'keyed'     every keyed pending job, as keyed_entry(run_after,
--                     member) with score 0: in lex order exactly as in the
--                     pending zset, so ranks of the pending zset minus
--                     counts of this zset are counts of the jobs without a
--                     key, and lane '' needs no zset of its own
-- A keyed lane with jobs is in turns or in waits, never both. A dequeue
-- takes the first lane of the turns that has a due job, one job from it,
-- and puts the lane last, so between two jobs of a key every other key in
-- turn gets one. A keyed lane met empty at its turn leaves; one whose
-- first job is not due then waits until it is, and joins the turns last.
-- Lane '' never leaves: without a due job it keeps its place, so jobs
-- without a key that come after a quiet spell are next. Lanes are kept
-- from the first keyed job that enters pending until every keyed lane is
-- empty again; then the priority costs what it did before. Turning lanes
-- on costs the same however many jobs are pending: lane '' is the pending
-- zset without the keyed index (plain_head), never a copy.
-- (pinlater/stores/memory/lanes.py states the same rules in Python.)
local function base_of(pending)
  return string.sub(pending, 1, #pending - 7)  -- without 'pending'
end

-- Keyed lane `lane` just got a job with run_after s.
local function lane_touch(base, lane, s, now)
  if redis.call('SISMEMBER', base .. 'inturn', lane) == 1 then return end
  if s <= now then
    redis.call('ZREM', base .. 'waits', lane)
    redis.call('RPUSH', base .. 'turns', lane)
    redis.call('SADD', base .. 'inturn', lane)
  else
    local w = redis.call('ZSCORE', base .. 'waits', lane)
    if not w or tonumber(w) > s then redis.call('ZADD', base .. 'waits', int(s), lane) end
  end
end

-- Whether the priority of this pending zset keeps lanes.
local function lanes_on(pending)
  local base = base_of(pending)
  return redis.call('EXISTS', base .. 'turns', base .. 'waits') > 0
end

-- The keyed index's entry of a pending job: its run_after, zero-padded to
-- the 16 digits of the largest (limits.py: 2**53 - 1), then its member
-- (members order as their ids), so lex order is (run_after, id).
local function keyed_entry(s, m)
  return string.format('%016d', s) .. m
end

-- Job m, of fairness key `key` ('' none), enters PENDING with run_after s.
-- The first keyed job starts the lanes with lane '' first in turn: the
-- jobs pending until then have no key (none did while lanes were off) and
-- are lane '' as they are.
local function pend(pending, m, s, key, now)
  local base = base_of(pending)
  redis.call('ZADD', pending, int(s), m)
  if key == '' then return end
  if not lanes_on(pending) then redis.call('RPUSH', base .. 'turns', '') end
  redis.call('ZADD', base .. 'lane:' .. key, int(s), m)
  redis.call('ZADD', base .. 'keyed', 0, keyed_entry(s, m))
  lane_touch(base, key, s, now)
end

-- Pending job m of key `key` (not ''), whose score in the pending zset is
-- s, leaves its lane and the keyed index (the caller takes it out of the
-- pending zset).
local function unpend_keyed(base, key, s, m)
  redis.call('ZREM', base .. 'lane:' .. key, m)
  redis.call('ZREM', base .. 'keyed', keyed_entry(s, m))
end

-- Jobs looked at one by one before lane '' searches by counting.
local PLAIN_WINDOW = 16

-- Lane '' at its turn: the first due job of the pending zset that is not
-- in the keyed index, and its rank, or nil if there is none. Every job
-- ranked below `from` is keyed (the caller passes the rank of the last
-- job it took from lane '' in this call, 0 at first). The first
-- PLAIN_WINDOW from there are looked at one by one; past them, a binary
-- search over ranks, where the jobs without a key at ranks 0..r number
-- r + 1 minus the keyed entries up to the job at rank r: at most 2 log2(N)
-- O(log N) calls, however the keyed and unkeyed jobs mix.
local function plain_head(pending, from, now)
  local keyed = base_of(pending) .. 'keyed'
  if redis.call('ZCARD', pending) <= redis.call('ZCARD', keyed) then return nil end
  local rows = redis.call('ZRANGE', pending, from, from + PLAIN_WINDOW - 1, 'WITHSCORES')
  local entries, last_due = {}, true
  for i = 1, #rows, 2 do
    local s = tonumber(rows[i + 1])
    if s > now then last_due = false break end
    entries[#entries + 1] = keyed_entry(s, rows[i])
  end
  if #entries > 0 then
    local hit = redis.call('ZMSCORE', keyed, unpack(entries))
    for i = 1, #entries do
      if not hit[i] then return rows[2 * i - 1], from + i - 1 end
    end
  end
  if not last_due or #rows < 2 * PLAIN_WINDOW then return nil end
  local due = redis.call('ZCOUNT', pending, '-inf', int(now))
  local keyed_due = redis.call('ZLEXCOUNT', keyed, '-', '(' .. string.format('%016d', now + 1))
  if due <= keyed_due then return nil end
  local function plain_upto(r)
    local row = redis.call('ZRANGE', pending, r, r, 'WITHSCORES')
    return r + 1 - redis.call('ZLEXCOUNT', keyed, '-', '[' .. keyed_entry(tonumber(row[2]), row[1]))
  end
  local lo, hi = from + PLAIN_WINDOW, due - 1
  while lo < hi do
    local mid = floor((lo + hi) / 2)
    if plain_upto(mid) >= 1 then hi = mid else lo = mid + 1 end
  end
  local row = redis.call('ZRANGE', pending, lo, lo, 'WITHSCORES')
  -- The counts hold while the index matches the pending zset; should it
  -- not, nothing keyed is served as lane ''.
  if #row == 0 or tonumber(row[2]) > now or redis.call('ZSCORE', keyed, keyed_entry(tonumber(row[2]), row[1])) then
    return nil
  end
  return row[1], lo
end

-- A fairness key from a batch item: nil or text of 1..64 bytes.
local function valid_key(k)
  return k == nil or (type(k) == 'string' and #k >= 1 and #k <= 64)
end

-- Unique keys (ShardBackend.enqueue_unique), per queue in one hash,
-- pl:{queue}:unique (pinlater/stores/redis/keys.py):
--   'k'..key      -> 'P:ID', the job that took the key (priority P, id ID)
--   '@'           -> where the sweep below goes on (an HSCAN cursor)
-- A key is held while its job is PENDING or RUNNING, or SUCCEEDED less
-- than `period` ms before `now`; an entry whose job ended is simply not
-- honoured. Ids are never reused, so an entry whose job left storage
-- never holds again: the sweep removes it later (drop_unique), which
-- spares an enqueue a second field per key naming the key from its job.
-- Stores written before kept that field, '#'..'P:ID' -> key; the sweep
-- removes those the same way.
local function holds_unique(qbase, at, period, now)
  local p, id = string.match(at, '^(%d+):(%d+)$')
  if not p then return false end
  local v = redis.call('HGET', qbase .. 'p' .. p .. ':jobs', member_of(tonumber(id)))
  if not v then return false end
  local state = string.byte(v, 1) % 4
  if state <= 1 then return true end
  if state ~= 2 or period <= 0 then return false end
  local _, _, _, _, updated = unpack_header(v)
  return now - updated < period
end

-- Whether job 'P:ID' of the queue at `qbase` has left storage.
local function unique_job_gone(qbase, at)
  local p, id = string.match(at, '^(%d+):(%d+)$')
  if not p then return true end
  return redis.call('HEXISTS', qbase .. 'p' .. p .. ':jobs', member_of(tonumber(id))) == 0
end

-- Jobs `members` of the priority whose jobs hash is `jobs` left storage:
-- entries of the unique hash whose jobs are gone are swept, about four
-- for each of them, from where the last sweep stopped. Each job leaves at
-- most one such entry, so gone ones stay about a quarter of the hash at
-- most; a small hash (one HSCAN page) is swept whole every time.
local function drop_unique(jobs, members)
  if #members == 0 then return end
  local qbase = string.match(jobs, '^(.*:)p%d+:jobs$')
  local uniq = qbase .. 'unique'
  local cursor = redis.call('HGET', uniq, '@')
  if not cursor and redis.call('EXISTS', uniq) == 0 then return end
  cursor = cursor or '0'
  local budget, seen = 4 * #members + 32, 0
  repeat
    local page = redis.call('HSCAN', uniq, cursor, 'COUNT', budget - seen)
    cursor = page[1]
    local flat, gone = page[2], {}
    for i = 1, #flat, 2 do
      local field, first = flat[i], string.sub(flat[i], 1, 1)
      if (first == 'k' and unique_job_gone(qbase, flat[i + 1]))
          or (first == '#' and unique_job_gone(qbase, string.sub(field, 2))) then
        gone[#gone + 1] = field
      end
    end
    seen = seen + #flat / 2
    if #gone > 0 then hdel_many(uniq, gone) end
  until cursor == '0' or seen >= budget
  if cursor == '0' then
    redis.call('HDEL', uniq, '@')  -- the last field out deletes the hash
  elseif redis.call('EXISTS', uniq) == 1 then
    redis.call('HSET', uniq, '@', cursor)
  end
end
