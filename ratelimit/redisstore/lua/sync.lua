-- sync.lua: push one counter's local hits and pull its total, for the
-- periodic mode (sync_rate > 0). One call per counter, all of one cycle
-- sent in one pipeline.
--
-- KEYS[1]  counter hash (fields s, c, p as in take.lua).
-- ARGV[1]  time in Unix microseconds, or "" to read Redis TIME.
-- ARGV[2]  kind: 0 fixed window, 1 sliding window, 2 token bucket.
-- ARGV[3]  window: W in ms; bucket: unused.
-- ARGV[4], ARGV[5]  window: start (Unix ms) and hits of a first batch;
--                   bucket: unused and the sum of admitted increments in us.
-- ARGV[6], ARGV[7]  window: start and hits of a second batch (0 hits when
--                   none); bucket: unused.
-- ARGV[8]  the least time to live of the key in ms (see take.lua).
--
-- Hits of a window older than the previous one are dropped: they can no
-- longer affect a decision. Reply: { s, c, p } after the push.

local now_us = tonumber(ARGV[1])
if ARGV[1] == '' then
  local t = redis.call('TIME')
  now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local now_ms = (now_us - now_us % 1000) / 1000
-- num reads a counter field: absent is 0, anything but an integer is an
-- error naming the key, never a silent zero.
local function num(v, key, field)
  if not v then return 0 end
  local x = tonumber(v)
  if not x or x ~= math.floor(x) then
    error('sluice: field ' .. field .. ' of ' .. key .. ' is not an integer: ' .. tostring(v))
  end
  return x
end

local kind = tonumber(ARGV[2])
local w = tonumber(ARGV[3])
local v = redis.call('HMGET', KEYS[1], 's', 'c', 'p')
local s = num(v[1], KEYS[1], 's')
local c = num(v[2], KEYS[1], 'c')
local p = num(v[3], KEYS[1], 'p')
local changed = false

if kind == 2 then
  local d = tonumber(ARGV[5])
  if d > 0 then
    s = math.max(s, now_us) + d
    changed = true
  end
else
  for j = 4, 6, 2 do
    local ds = tonumber(ARGV[j])
    local d = tonumber(ARGV[j + 1])
    if d ~= 0 then
      if ds > s then
        if s == ds - w then p = c else p = 0 end
        c = 0
        s = ds
      end
      if ds == s then
        c = c + d
        changed = true
      elseif ds == s - w then
        p = p + d
        changed = true
      end
    end
  end
end

if changed then
  local ttl
  if kind == 2 then
    redis.call('HSET', KEYS[1], 's', string.format('%d', s))
    ttl = math.ceil((s - now_us) / 1000) + 1
  else
    redis.call('HSET', KEYS[1], 's', string.format('%d', s), 'c', string.format('%d', c), 'p', string.format('%d', p))
    ttl = s + 2 * w - now_ms
  end
  redis.call('PEXPIRE', KEYS[1], string.format('%d', math.max(ttl, tonumber(ARGV[8]), 1)))
end

return { s, c, p }
