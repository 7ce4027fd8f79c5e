-- sync.lua: push the local hits of a batch of counters and pull their
-- totals, for the periodic mode (sync_rate > 0). A cycle sends one call
-- per batch of counters (on Cluster, per slot), all in one pipeline.
--
-- KEYS     the counters, each the string "s c p" of take.lua.
-- ARGV[1]  time in Unix microseconds, or "" to read Redis TIME (once).
-- ARGV[2]  the least time to live of a written key in ms (see take.lua).
-- then per key, 6 values:
--   kind     0 fixed window, 1 sliding window, 2 token bucket
--   w        window: W in ms; bucket: unused
--   s1, d1   window: start (Unix ms) and hits of a first batch; bucket:
--            unused and the sum of admitted increments in us
--   s2, d2   window: start and hits of a second batch (0 hits when none);
--            bucket: unused
--
-- Hits of a window older than the previous one are dropped: they can no
-- longer affect a decision. Reply: per key, 3 values: s, c, p after the
-- push; a key that does not hold a counter gives instead an error text and
-- two zeros, and is left as it is (the other keys are unaffected).

local now_us = tonumber(ARGV[1])
if ARGV[1] == '' then
  local t = redis.call('TIME')
  now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local now_ms = (now_us - now_us % 1000) / 1000
local min_ttl = tonumber(ARGV[2])

local function push(key, j)
  local kind = tonumber(ARGV[j])
  local w = tonumber(ARGV[j + 1])
  local s, c, p = 0, 0, 0
  local v = redis.call('GET', key)
  if v then
    local a, b, d = string.match(v, '^(%-?%d+) (%-?%d+) (%-?%d+)$')
    if not a then
      error('sluice: counter ' .. key .. ' is not "start count previous": ' .. v)
    end
    s, c, p = tonumber(a), tonumber(b), tonumber(d)
  end
  local changed = false

  if kind == 2 then
    local d = tonumber(ARGV[j + 3])
    if d > 0 then
      s = math.max(s, now_us) + d
      changed = true
    end
  else
    for x = j + 2, j + 4, 2 do
      local ds = tonumber(ARGV[x])
      local d = tonumber(ARGV[x + 1])
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
    redis.call('SET', key, string.format('%d %d %d', s, c, p),
      'PX', string.format('%d', math.max(ttl, min_ttl, 1)))
  end
  return s, c, p
end

local reply = {}
for i, key in ipairs(KEYS) do
  local ok, s, c, p = pcall(push, key, 3 + 6 * (i - 1))
  if ok then
    reply[#reply + 1] = s
    reply[#reply + 1] = c
    reply[#reply + 1] = p
  else
    if type(s) == 'table' then s = s.err end
    reply[#reply + 1] = tostring(s)
    reply[#reply + 1] = 0
    reply[#reply + 1] = 0
  end
end
return reply
