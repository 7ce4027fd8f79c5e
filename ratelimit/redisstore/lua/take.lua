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
-- ARGV[3]  number of plans P. A plan is what requests with the same limits,
--          cost and penalty share, parsed once per batch:
--   cost     cost (>= 1)
--   penalty  "1" to keep a denied call counted in window limits
--   n        number of limits
--   then 4 values per limit:
--     kind   0 fixed window, 1 sliding window, 2 token bucket
--     count  Limit.Count
--     a      window: W in ms; bucket: tau = Burst*T, the bucket depth in
--            us, T being the emission interval W/Count rounded up to a us
--     b      window: unused (0); bucket: the increment cost*T in us, or -1
--            when the cost exceeds the burst (never allowed)
-- then per request, 2 values:
--   now      decision time in Unix microseconds, or "" for Redis TIME
--            (read once per batch)
--   plan     the index of its plan, from 1
--
-- Reply: per request, 2 + 3n values: { allowed (1 or 0), now_us, s_1, c_1,
-- p_1, ..., s_n, c_n, p_n } where s_i, c_i, p_i are the counters as read,
-- before the request. A request that fails (a key holding another type, a
-- counter that is not an integer) gives instead an error text followed by
-- 1 + 3n zeros, and changes nothing; the other requests are unaffected.
--
-- Speed: the script allocates no table per request or limit (per-limit
-- state lives in arrays reused by every request, counters in tables keyed
-- by key): table creation is most of a Lua script's own cost.
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

-- Counters of the batch. raw[key] is what MGET read: a string, false when
-- absent, or { err = ... } for a key holding another type. S, C, P hold a
-- counter once parsed or changed; T[key] is the time to live of a changed
-- counter, written once at the end, in the order of first change.
local raw, S, C, P, T, order = {}, {}, {}, {}, {}, {}
do
  local uniq, seen = {}, {}
  for _, key in ipairs(KEYS) do
    if not seen[key] then
      seen[key] = true
      uniq[#uniq + 1] = key
    end
  end
  for from = 1, #uniq, 1000 do -- unpack is bounded by the Lua stack
    local part = redis.call('MGET', unpack(uniq, from, math.min(from + 999, #uniq)))
    for i = 1, #part do
      local key, v = uniq[from + i - 1], part[i]
      -- MGET reads a value of another type as absent; SET would then
      -- destroy it. A key that exists without a string value is reported
      -- by its request instead.
      if not v and redis.call('EXISTS', key) == 1 then
        v = { err = 'WRONGTYPE counter ' .. key .. ' holds a ' .. redis.call('TYPE', key).ok .. ', not a string' }
      end
      raw[key] = v
    end
  end
end

-- load returns a counter: absent is 0 0 0, anything but three integers is
-- an error naming the key, never a silent zero.
local function load(key)
  local s = S[key]
  if s then return s, C[key], P[key] end
  local v = raw[key]
  if not v then return 0, 0, 0 end
  if type(v) == 'table' then error(v.err) end
  local a, b, c = string.match(v, '^(%-?%d+) (%-?%d+) (%-?%d+)$')
  if not a then
    error('sluice: counter ' .. key .. ' is not "start count previous": ' .. v)
  end
  a, b, c = tonumber(a), tonumber(b), tonumber(c)
  S[key], C[key], P[key] = a, b, c
  return a, b, c
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

-- Per-limit state of the request being decided, reused by every request.
local LK, LKIND, LW, LINC, LS, LC, LP, LCOUNTED = {}, {}, {}, {}, {}, {}, {}, {}
local reply = {}

-- The plans of the batch (see below), 4 values each: cost, penalty, n and
-- the index of the first limit's values in LIM, which holds 4 values per
-- limit: kind, count, a, b. Two tables, whatever the batch: creating
-- tables is what a short script spends most on.
local PLAN, LIM = {}, {}

-- decide runs one request whose keys start at KEYS[k] and whose n limits'
-- values start at LIM[l0], appending its values to reply.
local function decide(k, l0, n, now_us, cost, penalty)
  local now_ms = (now_us - now_us % 1000) / 1000
  local base = #reply
  reply[base + 1] = 1
  reply[base + 2] = now_us
  local denied = false
  for i = 1, n do
    local key = KEYS[k + i - 1]
    local l = l0 + 4 * (i - 1)
    local kind, count, a, b = LIM[l], LIM[l + 1], LIM[l + 2], LIM[l + 3]
    local s, c, p = load(key)
    local o = base + 2 + 3 * (i - 1)
    reply[o + 1] = s
    reply[o + 2] = c
    reply[o + 3] = p
    LK[i], LKIND[i], LW[i], LINC[i], LCOUNTED[i] = key, kind, a, b, false
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
        s = tat + b
        LCOUNTED[i] = true
      end
      if exceeded then denied = true end
    else
      local w = a
      -- roll to the window containing now; a clock step back keeps
      -- counting in the newest window.
      local start = now_ms - now_ms % w
      if not (s == start or start < s) then
        if s == start - w then p = c else p = 0 end
        c = 0
        s = start
      end
      if add then
        c = c + cost
        LCOUNTED[i] = true
        local exceeded
        if c > count then
          exceeded = true
        elseif kind == 0 then
          exceeded = false
        else
          -- cur*w + p*rem > count*w  <=>  p > floor((count-cur)*w / rem)
          local e = now_ms - s
          if e < 0 then e = 0 end
          exceeded = p > floordiv((count - c) * w, w - e)
        end
        if exceeded then denied = true end
      end
    end
    LS[i], LC[i], LP[i] = s, c, p
  end

  if denied then
    reply[base + 1] = 0
    for i = 1, n do
      if LCOUNTED[i] and (LKIND[i] == 2 or not penalty) then
        if LKIND[i] == 2 then LS[i] = LS[i] - LINC[i] else LC[i] = LC[i] - cost end
        LCOUNTED[i] = false
      end
    end
  end

  for i = 1, n do
    if LCOUNTED[i] then
      local key, ttl = LK[i]
      if LKIND[i] == 2 then
        ttl = math.ceil((LS[i] - now_us) / 1000) + 1
      else
        ttl = LS[i] + 2 * LW[i] - now_ms
      end
      if not T[key] then order[#order + 1] = key end
      S[key], C[key], P[key], T[key] = LS[i], LC[i], LP[i], math.max(ttl, min_ttl, 1)
    end
  end
end

-- The plans: each a cost, a penalty flag and its limits, parsed once for
-- every request of the batch that uses it.
local j, l = 4, 1
for p = 1, tonumber(ARGV[3]) do
  local n = tonumber(ARGV[j + 2])
  local h = 4 * p - 3
  PLAN[h], PLAN[h + 1], PLAN[h + 2], PLAN[h + 3] = tonumber(ARGV[j]), ARGV[j + 1] == '1', n, l
  j = j + 3
  for _ = 1, n do
    LIM[l], LIM[l + 1], LIM[l + 2], LIM[l + 3] = tonumber(ARGV[j]), tonumber(ARGV[j + 1]), tonumber(ARGV[j + 2]), tonumber(ARGV[j + 3])
    l = l + 4
    j = j + 4
  end
end

local k = 1
for _ = 1, tonumber(ARGV[1]) do
  local now_us = ARGV[j]
  local h = 4 * tonumber(ARGV[j + 1]) - 3
  local n = PLAN[h + 2]
  if now_us == '' then now_us = clock() else now_us = tonumber(now_us) end
  local mark = #reply
  local ok, err = pcall(decide, k, PLAN[h + 3], n, now_us, PLAN[h], PLAN[h + 1])
  if not ok then
    for x = #reply, mark + 1, -1 do reply[x] = nil end
    if type(err) == 'table' then err = err.err end
    reply[mark + 1] = tostring(err)
    for x = 1, 1 + 3 * n do reply[mark + 1 + x] = 0 end
  end
  k = k + n
  j = j + 2
end

for _, key in ipairs(order) do
  redis.call('SET', key, string.format('%d %d %d', S[key], C[key], P[key]), 'PX', string.format('%d', T[key]))
end
return reply
