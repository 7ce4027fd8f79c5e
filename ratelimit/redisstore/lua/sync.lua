-- sync.lua: push one counter's local hits and pull its total, for the
-- periodic mode (sync_rate > 0). One call per counter, all of one cycle
-- sent in one pipeline.
--
-- KEYS[1]  counter, the string "s c p" of take.lua.
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

local kind = tonumber(ARGV[2])
local w = tonumber(ARGV[3])
local s, c, p = 0, 0, 0
local v = redis.call('GET', KEYS[1])
if v then
  local a, b, d = string.match(v, '^(%-?%d+) (%-?%d+) (%-?%d+)$')
  if not a then
    error('sluice: counter ' .. KEYS[1] .. ' is not "start count previous": ' .. v)
  end
  s, c, p = tonumber(a), tonumber(b), tonumber(d)
end
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
    ttl = math.ceil((s - now_us) / 1000) + 1
  else
    ttl = s + 2 * w - now_ms
  end
  redis.call('SET', KEYS[1], string.format('%d %d %d', s, c, p),
    'PX', string.format('%d', math.max(ttl, tonumber(ARGV[8]), 1)))
end

return { s, c, p }
