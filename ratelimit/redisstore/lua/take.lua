-- take.lua: decide one request against several limits of one key,
-- atomically. It mirrors ratelimit.Apply (package ratelimit,
-- algorithms.go) step for step; Go then replays Apply on the counters this
-- script read, so the reported figures come from the one Go statement of
-- the math and this script only has to agree on allow/deny and on the
-- stored counters.
--
-- KEYS[i]  counter hash of limit i, fields s (window start in Unix ms, or a
--          token bucket's TAT in Unix us), c (current window count) and
--          p (previous window count). All keys carry one hash tag.
-- ARGV[1]  decision time in Unix microseconds, or "" to read Redis TIME.
-- ARGV[2]  cost (>= 1).
-- ARGV[3]  "1" to keep a denied call counted in window limits (penalty).
-- then 4 values per limit i, at ARGV[4+4*(i-1)] ..:
--   kind   0 fixed window, 1 sliding window, 2 token bucket
--   count  Limit.Count
--   a      window: W in ms; bucket: tau = Burst*T, the bucket depth in us,
--          T being the emission interval W/Count rounded up to a us
--   b      window: unused (0); bucket: the increment cost*T in us, or -1
--          when the cost exceeds the burst (never allowed)
--
-- Reply: { allowed (1 or 0), now_us, s_1, c_1, p_1, ..., s_n, c_n, p_n }
-- where s_i, c_i, p_i are the counters as read, before this call.
--
-- Exactness: Lua numbers are doubles, exact for integers up to 2^53. Go
-- only sends limits with count*W_ms <= 2^53 and bucket values tau and
-- the increment <= 2^52; times in us stay below 2^53 until the year
-- 2255. Comparisons that would multiply larger values are rearranged into
-- an exact floor division.

local now_us = tonumber(ARGV[1])
if ARGV[1] == '' then
  local t = redis.call('TIME')
  now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local now_ms = (now_us - now_us % 1000) / 1000
local cost = tonumber(ARGV[2])
local penalty = ARGV[3] == '1'
local n = #KEYS

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

local reply = { 1, now_us }
local st = {}
local denied = false

-- floor(a / b) for integers 0 <= a <= 2^53, b >= 1, exactly.
local function floordiv(a, b)
  local q = math.floor(a / b)
  if q * b > a then
    q = q - 1
  elseif (q + 1) * b <= a then
    q = q + 1
  end
  return q
end

for i = 1, n do
  local j = 4 + 4 * (i - 1)
  local kind = tonumber(ARGV[j])
  local count = tonumber(ARGV[j + 1])
  local a = tonumber(ARGV[j + 2])
  local b = tonumber(ARGV[j + 3])
  local v = redis.call('HMGET', KEYS[i], 's', 'c', 'p')
  local s = num(v[1], KEYS[i], 's')
  local c = num(v[2], KEYS[i], 'c')
  local p = num(v[3], KEYS[i], 'p')
  reply[#reply + 1] = s
  reply[#reply + 1] = c
  reply[#reply + 1] = p
  local x = { kind = kind, s = s, c = c, p = p, counted = false, w = a, inc = b }
  st[i] = x
  local add = not denied
  if kind == 2 then
    -- Token bucket (GCRA): a is tau, b the increment (or -1).
    local tat = math.max(s, now_us)
    local exceeded = false
    if b < 0 then
      exceeded = add
    elseif tat + b - now_us > a then
      exceeded = add
    end
    if add and not exceeded then
      x.s = tat + b
      x.counted = true
    end
    if exceeded then denied = true end
  else
    local w = a
    -- roll to the window containing now; a clock step back keeps counting
    -- in the newest window.
    local start = now_ms - now_ms % w
    if not (s == start or start < s) then
      if s == start - w then x.p = c else x.p = 0 end
      x.c = 0
      x.s = start
    end
    if add then
      local cur = x.c + cost
      x.c = cur
      x.counted = true
      local exceeded
      if cur > count then
        exceeded = true
      elseif kind == 0 then
        exceeded = false
      else
        -- cur*w + p*rem > count*w  <=>  p > floor((count-cur)*w / rem)
        local e = now_ms - x.s
        if e < 0 then e = 0 end
        local rem = w - e
        exceeded = x.p > floordiv((count - cur) * w, rem)
      end
      if exceeded then denied = true end
    end
  end
end

if denied then
  reply[1] = 0
  for i = 1, n do
    local x = st[i]
    if x.counted and (x.kind == 2 or not penalty) then
      if x.kind == 2 then x.s = x.s - x.inc else x.c = x.c - cost end
      x.counted = false
    end
  end
end

for i = 1, n do
  local x = st[i]
  if x.counted then
    local ttl
    if x.kind == 2 then
      redis.call('HSET', KEYS[i], 's', x.s)
      ttl = math.ceil((x.s - now_us) / 1000) + 1
    else
      redis.call('HSET', KEYS[i], 's', x.s, 'c', x.c, 'p', x.p)
      ttl = x.s + 2 * x.w - now_ms
    end
    if ttl < 1 then ttl = 1 end
    redis.call('PEXPIRE', KEYS[i], ttl)
  end
end

return reply
