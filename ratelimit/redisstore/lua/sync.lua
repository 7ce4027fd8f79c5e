-- sync.lua: push the local hits of a batch of token buckets and pull their
-- TATs, for the periodic mode (sync_rate > 0). Window counters need no
-- script: a cycle pushes them with INCRBY (see sync.go). A cycle sends one
-- call per batch of buckets (on Cluster, per slot), in the same pipeline.
--
-- KEYS     the buckets: each key holds a TAT in Unix us (see take.lua).
-- ARGV[1]  time in Unix microseconds, or "" to read Redis TIME (once).
-- ARGV[2]  the least time to live of a written key in ms (see take.lua).
-- then per key, d: the sum of the increments (us) the node admitted since
-- its last push, 0 to only read.
--
-- A bucket's new TAT is max(TAT, now) + d: the node's admissions, applied
-- as if they had arrived now. Reply: per key, 3 values: the TAT after the
-- push and two zeros (a storekit.Counter); a key that does not hold a TAT
-- gives instead an error text and two zeros, and is left as it is (the
-- other keys are unaffected).

local now_us = tonumber(ARGV[1])
if ARGV[1] == '' then
  local t = redis.call('TIME')
  now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local min_ttl = tonumber(ARGV[2])

local function push(key, d)
  local v = redis.call('GET', key)
  local s = 0
  if v then
    s = tonumber(v)
    if not s then
      error('sluice: ' .. key .. ' holds ' .. v .. ', not a TAT')
    end
  end
  if d > 0 then
    s = math.max(s, now_us) + d
    redis.call('SET', key, string.format('%d', s),
      'PX', string.format('%d', math.max(math.ceil((s - now_us) / 1000) + 1, min_ttl, 1)))
  end
  return s
end

local reply = {}
for i, key in ipairs(KEYS) do
  local ok, s = pcall(push, key, tonumber(ARGV[2 + i]))
  if ok then
    reply[#reply + 1] = s
  else
    if type(s) == 'table' then s = s.err end
    reply[#reply + 1] = tostring(s)
  end
  reply[#reply + 1] = 0
  reply[#reply + 1] = 0
end
return reply
