-- journal.lua: the change journal of one namespace, for the periodic mode
-- (sync_rate > 0). After pushing its hits, a node records here which
-- counters it pushed and learns which counters other nodes pushed since its
-- previous call, so that a cycle reads only counters that changed instead
-- of every counter it holds.
--
-- KEYS[1]  journal: sorted set, member "<counter id>:<key>", score the
--          sequence number of the call that last recorded it.
-- KEYS[2]  hash: "seq" the last sequence number given out, "epoch" the
--          server time the journal was created (a new epoch means the
--          journal was lost: a caller must not trust its cursor).
-- KEYS[3]  marks: list of "<seq> <ms>", one per call, oldest first, to drop
--          entries by age.
-- ARGV[1]  time in Unix microseconds, or "" to read Redis TIME.
-- ARGV[2]  the caller's cursor: the sequence number of its previous call,
--          or -1 for none.
-- ARGV[3]  the caller's epoch, or "".
-- ARGV[4]  retention in ms: entries recorded longer ago are dropped; a
--          caller whose cursor is older must read every counter.
-- ARGV[5..] the members this caller pushed since its previous call.
--
-- Reply: { seq, epoch, full, members... }: full is 1 when the caller must
-- read every counter it holds (no cursor, another epoch, or a cursor older
-- than the journal), else 0 and members are the counters others pushed
-- since the cursor (those this caller pushed too included).

local now_us = tonumber(ARGV[1])
if ARGV[1] == '' then
  local t = redis.call('TIME')
  now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local now_ms = (now_us - now_us % 1000) / 1000
local cursor = tonumber(ARGV[2])
local retention = tonumber(ARGV[4])

local seq = redis.call('HINCRBY', KEYS[2], 'seq', 1)
if seq == 1 then
  -- The server's clock, even when callers pass theirs: two journals of
  -- one namespace must never share an epoch.
  local t = redis.call('TIME')
  redis.call('HSET', KEYS[2], 'epoch', t[1] .. '.' .. t[2])
end
local epoch = redis.call('HGET', KEYS[2], 'epoch') or ''

local out = { seq, epoch, 0 }
redis.call('RPUSH', KEYS[3], seq .. ' ' .. now_ms)

-- Drop the entries of calls older than the retention.
while true do
  local m = redis.call('LINDEX', KEYS[3], 0)
  local mseq, mms = string.match(m, '^(%d+) (%-?%d+)$')
  if not mseq then
    error('sluice: journal mark is not "seq ms": ' .. m)
  end
  if tonumber(mseq) == seq or tonumber(mms) >= now_ms - retention then
    break
  end
  redis.call('LPOP', KEYS[3])
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', mseq)
end
local floor = tonumber(string.match(redis.call('LINDEX', KEYS[3], 0), '^(%d+)')) - 1
for i = 1, 3 do
  redis.call('PEXPIRE', KEYS[i], 3 * retention)
end

-- What others pushed since the cursor, read before this call's members
-- are recorded: a member this caller pushed too still shows with the
-- other's score.
local valid = cursor >= 0 and cursor < seq and ARGV[3] == epoch and cursor >= floor
if valid then
  for _, m in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. cursor, '(' .. seq)) do
    out[#out + 1] = m
  end
else
  out[3] = 1
end

-- Members in chunks (unpack is bounded by the Lua stack): one ZADD per
-- chunk, not a command per member.
for from = 5, #ARGV, 500 do
  local to = math.min(from + 499, #ARGV)
  local zargs, z = {}, 0
  for i = from, to do
    zargs[z + 1], zargs[z + 2] = seq, ARGV[i]
    z = z + 2
  end
  redis.call('ZADD', KEYS[1], unpack(zargs))
end
return out
