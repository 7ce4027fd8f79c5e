-- take.lua: decide a batch of requests, each against several limits of
-- one key, atomically. Each request mirrors ratelimit.Apply (package
-- ratelimit, algorithms.go) step for step; Go then replays Apply on the
-- counters this script read, so the reported figures come from the one Go
-- statement of the math and this script only has to agree on allow/deny
-- and on the stored counters. Requests are decided in order, so a batch is
-- the same as its requests sent one by one.
--
-- KEYS     the counters of every limit of every request, in order. A
--          counter is a string "s c p": s the window start in Unix ms (a
--          token bucket's TAT in Unix us), c the current window's count, p
--          the previous window's count (0 for a bucket). The batch reads
--          every counter with one MGET and writes each changed counter once,
--          with SET PX (a hash would cost another command for its expiry).
--          On Cluster the caller batches only keys of one slot.
-- ARGV[1]  number of requests R.
-- ARGV[2]  the least time to live of a written key, in ms: 0 with Redis'
--          clock; with the caller's clock, real time and decision time part,
--          so keys are kept long enough for the caller's timeline.
-- then per request, at the next free index:
--   now      decision time in Unix microseconds, or "" for Redis TIME
--            (read once per batch)
--   n        number of limits
--   cost     cost (>= 1)
--   penalty  "1" to keep a denied call counted in window limits
--   then 4 values per limit:
--     kind   0 fixed window, 1 sliding window, 2 token bucket
--     count  Limit.Count
--     a      window: W in ms; bucket: tau = Burst*T, the bucket depth in
--            us, T being the emission interval W/Count rounded up to a us
--     b      window: unused (0); bucket: the increment cost*T in us, or -1
--            when the cost exceeds the burst (never allowed)
--
-- Reply: per request, 2 + 3n values: { allowed (1 or 0), now_us, s_1, c_1,
-- p_1, ..., s_n, c_n, p_n } where s_i, c_i, p_i are the counters as read,
-- before the request. A request that fails (a key holding another type, a
-- counter that is not an integer) gives instead an error text followed by
-- 1 + 3n zeros, and changes nothing; the other requests are unaffected.
--
-- Exactness: Lua numbers are doubles, exact for integers up to 2^53. Go
-- only sends limits with count*W_ms <= 2^53 and bucket values tau and the
-- increment <= 2^52; times in us stay below 2^53 until the year 2255.
-- Comparisons that would multiply larger values are rearranged into an
-- exact floor division.

local min_ttl = tonumber(ARGV[2])
local time_us
local function clock()
  if not time_us then
    local t = redis.call('TIME')
    time_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  end
  return time_us
end

-- Counters of the batch: cache[key] is the value read by MGET (false when
-- absent), replaced by { s, c, p, ttl } once a request changed it; dirty
-- keys are written at the end.
local cache = {}
do
  local uniq, seen = {}, {}
  for _, key in ipairs(KEYS) do
    if not seen[key] then
      seen[key] = true
      uniq[#uniq + 1] = key
    end
  end
  local vals = {}
  for from = 1, #uniq, 1000 do -- unpack is bounded by the Lua stack
    local part = redis.call('MGET', unpack(uniq, from, math.min(from + 999, #uniq)))
    for i = 1, #part do vals[from + i - 1] = part[i] end
  end
  for i, key in ipairs(uniq) do
    -- MGET reads a value of another type as absent; SET would then
    -- destroy it. A key that exists without a string value is reported
    -- by its request instead.
    if not vals[i] and redis.call('EXISTS', key) == 1 then
      vals[i] = { err = 'WRONGTYPE counter ' .. key .. ' holds a ' .. redis.call('TYPE', key).ok .. ', not a string' }
    end
    cache[key] = vals[i]
  end
end
local dirty, order = {}, {}

-- load reads a counter: absent is 0 0 0, anything but three integers is
-- an error naming the key, never a silent zero.
local function load(key)
  local v = cache[key]
  if not v then return 0, 0, 0 end
  if type(v) == 'table' then
    if v.err then error(v.err) end
    return v[1], v[2], v[3]
  end
  local s, c, p = string.match(v, '^(%-?%d+) (%-?%d+) (%-?%d+)$')
  if not s then
    error('sluice: counter ' .. key .. ' is not "start count previous": ' .. v)
  end
  return tonumber(s), tonumber(c), tonumber(p)
end

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

-- decide runs one request whose keys start at KEYS[k] and whose limit
-- arguments start at ARGV[j]; it returns the request's reply values.
local function decide(k, j, n, now_us, cost, penalty)
  local now_ms = (now_us - now_us % 1000) / 1000
  local out = { 1, now_us }
  local st = {}
  local denied = false
  for i = 1, n do
    local key = KEYS[k + i - 1]
    local a0 = j + 4 * (i - 1)
    local kind = tonumber(ARGV[a0])
    local count = tonumber(ARGV[a0 + 1])
    local a = tonumber(ARGV[a0 + 2])
    local b = tonumber(ARGV[a0 + 3])
    local s, c, p = load(key)
    out[#out + 1] = s
    out[#out + 1] = c
    out[#out + 1] = p
    local x = { key = key, kind = kind, s = s, c = c, p = p, counted = false, w = a, inc = b }
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
      -- roll to the window containing now; a clock step back keeps
      -- counting in the newest window.
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
          exceeded = x.p > floordiv((count - cur) * w, w - e)
        end
        if exceeded then denied = true end
      end
    end
  end

  if denied then
    out[1] = 0
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
        ttl = math.ceil((x.s - now_us) / 1000) + 1
      else
        ttl = x.s + 2 * x.w - now_ms
      end
      if not dirty[x.key] then
        dirty[x.key] = true
        order[#order + 1] = x.key
      end
      cache[x.key] = { x.s, x.c, x.p, math.max(ttl, min_ttl, 1) }
    end
  end
  return out
end

local reply = {}
local k, j = 1, 3
for _ = 1, tonumber(ARGV[1]) do
  local now_us = ARGV[j]
  local n = tonumber(ARGV[j + 1])
  local cost = tonumber(ARGV[j + 2])
  local penalty = ARGV[j + 3] == '1'
  if now_us == '' then now_us = clock() else now_us = tonumber(now_us) end
  local ok, res = pcall(decide, k, j + 4, n, now_us, cost, penalty)
  if ok then
    for _, v in ipairs(res) do reply[#reply + 1] = v end
  else
    if type(res) == 'table' then res = res.err end
    reply[#reply + 1] = tostring(res)
    for _ = 1, 1 + 3 * n do reply[#reply + 1] = 0 end
  end
  k = k + n
  j = j + 4 + 4 * n
end
for _, key in ipairs(order) do
  local v = cache[key]
  redis.call('SET', key, string.format('%d %d %d', v[1], v[2], v[3]), 'PX', string.format('%d', v[4]))
end
return reply
