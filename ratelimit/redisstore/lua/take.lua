-- take.lua: decide a batch of requests, each against several limits of
-- one key, atomically. Each request mirrors storekit.Apply (package
-- ratelimit/storekit, apply.go) step for step; Go then replays Apply on the
-- counters this script read, so the reported figures come from the one Go
-- statement of the math and this script only has to agree on allow/deny
-- and on the stored counts. Requests are decided in order, so a batch is
-- the same as its requests sent one by one.
--
-- KEYS     the base key of every limit of every request, in order. Counts
--          are plain integers, so that a hit is one INCRBY:
--            fixed or sliding window: "<base>:<start>" holds the count of
--              the window starting at <start> (Unix ms), kept until the
--              end of the window after it (a sliding window reads it as
--              the previous count);
--            token bucket: "<base>" holds the TAT in Unix us.
--          All of a request's keys share its base's hash tag, so on
--          Cluster they sit in one slot; the caller batches only keys of
--          one slot.
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
-- p_1, ..., s_n, c_n, p_n } where s_i, c_i, p_i are the counter before the
-- request as storekit.Counter holds it: for a window, the start of the
-- window of now, its count and the previous window's count (0 for a fixed
-- window); for a bucket, the TAT and two zeros. A request that fails (a
-- key holding another type, a count that is not an integer) gives instead
-- an error text followed by 1 + 3n zeros, and changes nothing; the other
-- requests are unaffected.
--
-- Speed: a hit is one INCRBY (plus a PEXPIRE when it creates the window's
-- key) and every count of the batch is read by one MGET: no text to parse
-- or format, which is most of what a read-modify-write of a packed counter
-- costs inside Redis. The script allocates no table per request or limit.
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

-- The plans: PLAN holds 4 values per plan (cost, penalty, n, index of its
-- first limit in LIM), LIM 4 values per limit (kind, count, a, b).
local PLAN, LIM = {}, {}
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
local first_req = j

-- Pass 1: the keys every request reads. Per KEYS index k: CUR[k] the key
-- of the window of now (a bucket's base), PREV[k] the previous window's
-- (sliding only), START[k] the window start. NOW[r] is request r's time.
-- GET lists each key once, for one MGET.
local CUR, PREV, START, NOW = {}, {}, {}, {}
local GET, seen = {}, {}
local function want(key)
  if not seen[key] then
    seen[key] = true
    GET[#GET + 1] = key
  end
end
local k = 1
for r = 1, tonumber(ARGV[1]) do
  local a = first_req + 2 * (r - 1)
  local now_us = ARGV[a]
  if now_us == '' then now_us = clock() else now_us = tonumber(now_us) end
  NOW[r] = now_us
  local now_ms = (now_us - now_us % 1000) / 1000
  local h = 4 * tonumber(ARGV[a + 1]) - 3
  local l0 = PLAN[h + 3]
  for i = 0, PLAN[h + 2] - 1 do
    local base, kind = KEYS[k + i], LIM[l0 + 4 * i]
    if kind == 2 then
      CUR[k + i] = base
      want(base)
    else
      local w = LIM[l0 + 4 * i + 2]
      local start = now_ms - now_ms % w
      local cur = base .. ':' .. string.format('%d', start)
      CUR[k + i], START[k + i] = cur, start
      want(cur)
      if kind == 1 then
        local prev = base .. ':' .. string.format('%d', start - w)
        PREV[k + i] = prev
        want(prev)
      end
    end
  end
  k = k + PLAN[h + 2]
end

-- V[key] is a count (or TAT) as read and then as written by this batch:
-- a number, or an error text for a key whose value is not an integer.
-- ABSENT[key] is true while a key MGET did not find has not been written:
-- MGET reads a key of another type as absent, so the first write to it is
-- where WRONGTYPE shows.
local V, ABSENT = {}, {}
for from = 1, #GET, 1000 do -- unpack is bounded by the Lua stack
  local part = redis.call('MGET', unpack(GET, from, math.min(from + 999, #GET)))
  for i = 1, #part do
    local key, v = GET[from + i - 1], part[i]
    if v then
      if string.find(v, '^%-?%d+$') then
        V[key] = tonumber(v)
      else
        V[key] = 'sluice: ' .. key .. ' holds ' .. v .. ', not an integer count'
      end
    else
      V[key], ABSENT[key] = 0, true
    end
  end
end

-- read returns a count (or TAT) as the decision uses it: a count below
-- zero (a take-back that landed after its key vanished) counts as zero.
local function read(key)
  local v = V[key]
  if type(v) == 'string' then error(v) end
  if v < 0 then return 0 end
  return v
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

-- Writes of the request being decided, to undo them if a later one fails:
-- key, value before, whether it was absent.
local UK, UV, UA, nundo = {}, {}, {}, 0

local function remember(key)
  nundo = nundo + 1
  UK[nundo], UV[nundo], UA[nundo] = key, V[key], ABSENT[key]
end

-- incr adds d to a window count, setting its expiry when it creates the
-- key, or finds it at or below zero (left by a take-back that landed after
-- the key vanished, with no expiry). A key MGET read as absent may hold
-- another type: INCRBY then fails, changing nothing, and the error names
-- the key.
local function incr(key, d, ttl)
  local n = redis.pcall('INCRBY', key, d)
  if type(n) == 'table' then error('sluice: INCRBY ' .. key .. ': ' .. tostring(n.err)) end
  remember(key)
  if ABSENT[key] or n <= d then
    redis.call('PEXPIRE', key, string.format('%d', ttl))
  end
  V[key], ABSENT[key] = n, nil
end

-- settat stores a bucket's TAT. SET would replace a value of another type
-- that MGET read as absent: such a key is reported instead.
local function settat(key, tat, ttl)
  if ABSENT[key] and redis.call('EXISTS', key) == 1 then
    error('WRONGTYPE ' .. key .. ' holds a ' .. redis.call('TYPE', key).ok .. ', not a TAT')
  end
  remember(key)
  redis.call('SET', key, string.format('%d', tat), 'PX', string.format('%d', ttl))
  V[key], ABSENT[key] = tat, nil
end

-- undo takes back the writes of a request that failed half way.
local function undo()
  for x = nundo, 1, -1 do
    local key = UK[x]
    if UA[x] then
      redis.call('DEL', key)
    else
      redis.call('SET', key, string.format('%d', UV[x]), 'KEEPTTL')
    end
    V[key], ABSENT[key] = UV[x], UA[x]
  end
  nundo = 0
end

-- Per-limit state of the request being decided, reused by every request;
-- WR[key] is the last request that wrote key.
local LADD, WR = {}, {}
local reply = {}
local nreply = 0

-- decide runs request r, whose keys start at KEYS[k] and whose plan's
-- values start at PLAN[h], appending its values to reply.
local function decide(r, k, h)
  local now_us = NOW[r]
  local now_ms = (now_us - now_us % 1000) / 1000
  local cost, penalty, n, l0 = PLAN[h], PLAN[h + 1], PLAN[h + 2], PLAN[h + 3]
  local base = nreply
  reply[base + 1] = 1
  reply[base + 2] = now_us
  local denied = false
  for i = 1, n do
    local x = k + i - 1
    local l = l0 + 4 * (i - 1)
    local kind, count, a, b = LIM[l], LIM[l + 1], LIM[l + 2], LIM[l + 3]
    local o = base + 2 + 3 * (i - 1)
    local add = not denied
    LADD[i] = false
    if kind == 2 then
      -- Token bucket (GCRA): a is tau, b the increment (or -1).
      local s = read(CUR[x])
      reply[o + 1], reply[o + 2], reply[o + 3] = s, 0, 0
      if add then
        if b < 0 or math.max(s, now_us) + b - now_us > a then
          denied = true
        else
          LADD[i] = true
        end
      end
    else
      local s, c, p = START[x], read(CUR[x]), 0
      if kind == 1 then p = read(PREV[x]) end
      reply[o + 1], reply[o + 2], reply[o + 3] = s, c, p
      if add then
        LADD[i] = true
        c = c + cost
        if c > count then
          denied = true
        elseif kind == 1 then
          -- cur*w + p*rem > count*w  <=>  p > floor((count-cur)*w / rem)
          local w = a
          if p > floordiv((count - c) * w, w - (now_ms - s)) then denied = true end
        end
      end
    end
  end
  if denied then reply[base + 1] = 0 end

  -- Limits of one window share a counter (Kong's windows do): it is
  -- written once, as the last of them has it.
  nundo = 0
  for i = n, 1, -1 do
    local x = k + i - 1
    if WR[CUR[x]] == r then
      LADD[i] = false
    else
      WR[CUR[x]] = r
    end
    if LADD[i] then
      local l = l0 + 4 * (i - 1)
      local kind = LIM[l]
      if kind == 2 then
        if not denied then
          local tat = math.max(read(CUR[x]), now_us) + LIM[l + 3]
          settat(CUR[x], tat, math.max(math.ceil((tat - now_us) / 1000) + 1, min_ttl, 1))
        end
      elseif not denied or penalty then
        -- Two windows, and the slack of Go's windowSlack (incr.go).
        incr(CUR[x], cost, math.max(START[x] + 2 * LIM[l + 2] + 1000 - now_ms, min_ttl, 1))
      end
    end
  end
  nreply = base + 2 + 3 * n
end

k = 1
for r = 1, tonumber(ARGV[1]) do
  local h = 4 * tonumber(ARGV[first_req + 2 * r - 1]) - 3
  local n = PLAN[h + 2]
  local ok, err = pcall(decide, r, k, h)
  if not ok then
    undo()
    if type(err) == 'table' then err = err.err end
    reply[nreply + 1] = tostring(err)
    for x = 1, 1 + 3 * n do reply[nreply + 1 + x] = 0 end
    nreply = nreply + 2 + 3 * n
  end
  k = k + n
end
for x = #reply, nreply + 1, -1 do reply[x] = nil end
return reply
