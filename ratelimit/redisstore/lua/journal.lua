-- journal.lua: the change journal of one namespace, for the periodic mode
-- (sync_rate > 0). After pushing its hits, a node records here which
-- counters it pushed and learns which counters other nodes pushed since its
-- previous call, so that a cycle reads only counters that changed instead
-- of every counter it holds.
--
-- The journal is a log: one entry per call, holding the caller's members
-- as one string that the callers encode and decode ("<len>:<member>"
-- repeated; see sync.go). Recording a cycle is then one RPUSH whatever
-- its size, not a command per member.
--
-- KEYS[1]  log: list of entries, one per call, in sequence order: the
--          members the call recorded.
-- KEYS[2]  hash: "seq" the last sequence number given out, "epoch" the
--          server time the journal was created (a new epoch means the
--          journal was lost: a caller must not trust its cursor).
-- KEYS[3]  marks: list of "<seq> <ms>", one per entry of the log, at the
--          same positions, to drop entries by age.
-- ARGV[1]  time in Unix microseconds, or "" to read Redis TIME.
-- ARGV[2]  the caller's cursor: the sequence number of its previous call,
--          or -1 for none.
-- ARGV[3]  the caller's epoch, or "".
-- ARGV[4]  retention in ms: entries recorded longer ago are dropped; a
--          caller whose cursor is older must read every counter.
-- ARGV[5]  the members this caller pushed since its previous call,
--          encoded.
--
-- Reply: { seq, epoch, full, entries... }: full is 1 when the caller must
-- read every counter it holds (no cursor, another epoch, or a cursor older
-- than the log), else 0 and entries are those of the calls other nodes
-- made since the cursor (each encoded as recorded).

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

-- Drop the entries of calls older than the retention; first is then the
-- oldest sequence number the log still holds.
local first = seq
while true do
  local m = redis.call('LINDEX', KEYS[3], 0)
  if not m then break end
  local mseq, mms = string.match(m, '^(%d+) (%-?%d+)$')
  if not mseq then
    error('sluice: journal mark is not "seq ms": ' .. m)
  end
  if tonumber(mms) >= now_ms - retention then
    first = tonumber(mseq)
    break
  end
  redis.call('LPOP', KEYS[3])
  redis.call('LPOP', KEYS[1])
end

-- The log must hold every call from first on, one entry each (a partial
-- loss, an eviction of one list, breaks that: the log starts again).
local n = redis.call('LLEN', KEYS[3])
local intact = redis.call('LLEN', KEYS[1]) == n and (n == 0 or first + n == seq)
if not intact then
  redis.call('DEL', KEYS[1], KEYS[3])
  first = seq
end

local out = { seq, epoch, 0 }
-- Every call since the cursor must still be in the log.
if intact and cursor >= 0 and cursor < seq and ARGV[3] == epoch and first <= cursor + 1 then
  if cursor + 1 < seq then
    for _, e in ipairs(redis.call('LRANGE', KEYS[1], cursor + 1 - first, seq - 1 - first)) do
      out[#out + 1] = e
    end
  end
else
  out[3] = 1
end

redis.call('RPUSH', KEYS[1], ARGV[5])
redis.call('RPUSH', KEYS[3], seq .. ' ' .. now_ms)
for i = 1, 3 do
  redis.call('PEXPIRE', KEYS[i], 3 * retention)
end
return out
