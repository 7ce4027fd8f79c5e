-- sync.lua: push the local hits of a batch of counters and pull their
-- totals, for the periodic mode (sync_rate > 0). A cycle sends one call
-- per batch of counters (on Cluster, per slot), all in one pipeline; a
-- counter with no hits to push is only read.
--
-- KEYS     the base keys of the counters, in take.lua's layout: a window's
--          count at "<base>:<start>" (an integer), a bucket's TAT at
--          "<base>".
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
-- push, as ratelimit.Counter holds them: for a window, the newest of the
-- window of now and the windows pushed, its count and the previous
-- window's count; for a bucket, the TAT and two zeros. A key whose value
-- is not a count gives instead an error text and two zeros, and is left
-- as it is (the other keys are unaffected).

local now_us = tonumber(ARGV[1])
if ARGV[1] == '' then
  local t = redis.call('TIME')
  now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local now_ms = (now_us - now_us % 1000) / 1000
local min_ttl = tonumber(ARGV[2])

-- wkey returns the key of the window of base starting at start.
local function wkey(base, start)
  return base .. ':' .. string.format('%d', start)
end

-- count reads an integer count, or fails naming the key.
local function count(key, v)
  if not v then return 0 end
  local n = tonumber(v)
  if not n then
    error('sluice: ' .. key .. ' holds ' .. v .. ', not an integer count')
  end
  return n
end

local function push(base, j)
  local kind = tonumber(ARGV[j])
  if kind == 2 then
    local s = count(base, redis.call('GET', base))
    local d = tonumber(ARGV[j + 3])
    if d > 0 then
      s = math.max(s, now_us) + d
      redis.call('SET', base, string.format('%d', s),
        'PX', string.format('%d', math.max(math.ceil((s - now_us) / 1000) + 1, min_ttl, 1)))
    end
    return s, 0, 0
  end

  local w = tonumber(ARGV[j + 1])
  local s = now_ms - now_ms % w
  local done = {}
  for x = j + 2, j + 4, 2 do
    local start, hits = tonumber(ARGV[x]), tonumber(ARGV[x + 1])
    if hits ~= 0 and start >= s - w then
      local key = wkey(base, start)
      local n = redis.pcall('INCRBY', key, hits)
      if type(n) == 'table' then
        -- A foreign value: take back the first push, so that the key's
        -- counters are left as they were.
        for _, u in ipairs(done) do redis.call('DECRBY', u[1], u[2]) end
        error('sluice: ' .. key .. ': ' .. tostring(n.err))
      end
      done[#done + 1] = { key, hits }
      if n == hits then
        redis.call('PEXPIRE', key, string.format('%d', math.max(start + 2 * w - now_ms, min_ttl, 1)))
      end
      if start > s then s = start end
    end
  end
  local cur, prev = wkey(base, s), wkey(base, s - w)
  local v = redis.call('MGET', cur, prev)
  local c, p = count(cur, v[1]), count(prev, v[2])
  if kind == 0 then p = 0 end
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
