-- acquire.lua: take or renew one concurrency lease, atomically.
--
-- KEYS[1]  sorted set of live lease ids, scored by expiry in Unix us.
-- ARGV[1]  time in Unix microseconds, or "" to read Redis TIME.
-- ARGV[2]  lease id.
-- ARGV[3]  max live leases.
-- ARGV[4]  ttl in microseconds.
-- ARGV[5]  the least time to live of the set in ms (see take.lua).
--
-- Expired leases (score <= now) are removed before the check. An id that
-- is already live is renewed without taking a second slot.
-- Reply: { allowed (1 or 0), active, now_us, t } where t is the new expiry
-- (Unix us) when allowed and the expiry of the oldest live lease when not.

local now_us = tonumber(ARGV[1])
if ARGV[1] == '' then
  local tm = redis.call('TIME')
  now_us = tonumber(tm[1]) * 1000000 + tonumber(tm[2])
end
local id = ARGV[2]
local max = tonumber(ARGV[3])
local ttl = tonumber(ARGV[4])

redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', string.format('%d', now_us))
local held = redis.call('ZSCORE', KEYS[1], id)
local n = redis.call('ZCARD', KEYS[1])
if held or n < max then
  local exp = now_us + ttl
  redis.call('ZADD', KEYS[1], string.format('%d', exp), id)
  if not held then n = n + 1 end
  local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
  local keep = math.ceil((tonumber(last[2]) - now_us) / 1000) + 1
  redis.call('PEXPIRE', KEYS[1], string.format('%d', math.max(keep, tonumber(ARGV[5]))))
  return { 1, n, now_us, exp }
end
local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
return { 0, n, now_us, tonumber(oldest[2]) }
