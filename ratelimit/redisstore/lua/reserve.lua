-- reserve.lua: take one request's units for the earliest moment at which
-- every limit admits them (ratelimit.Reserver.Reserve), atomically. It
-- mirrors storekit.Reserve (package ratelimit/storekit, reserve.go) step
-- for step; Go replays storekit.Reserve on the counters this script read
-- and checks that the two agree.
--
-- KEYS     the base key of every limit, in order, as for take.lua: a
--          window's count is "<base>:<start>" (Unix ms), a token bucket's
--          TAT "<base>" (Unix us). All share one hash tag.
-- ARGV[1]  now in Unix us, or "" for Redis TIME
-- ARGV[2]  the least time to live of a written key, in ms (as take.lua)
-- ARGV[3]  cost (>= 1)
-- ARGV[4]  the longest delay in us (a call is not ok when its moment is
--          more than this after now_us), or "" for none
-- ARGV[5]  number of limits n
-- then 4 values per limit:
--   kind   0 fixed window, 1 sliding window, 2 token bucket
--   count  Limit.Count
--   a      window: W in ms; bucket: tau = Burst*T, the bucket depth in us
--   b      window: 0; bucket: the increment cost*T in us, or -1 when the
--          cost exceeds the burst
--
-- Reply: { ok (1 or 0), now_us, at_us, then 4 values per limit: the
-- counter as storekit.Counter holds it before the call (window: the start
-- of the window of now, its count, the previous window's, the next
-- window's; bucket: the TAT and three zeros), then, when ok, one mark per
-- limit: the start of the window the units went to, or the bucket's new
-- TAT }. at_us is, when ok, the reserved moment; otherwise when to try
-- again, or -1 for never. A key holding something else than an integer
-- fails the script before anything is written.
--
-- Exactness: as take.lua (Go checks count*W and the bucket values).

local now_us = ARGV[1]
if now_us == '' then
  local t = redis.call('TIME')
  now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now_us = tonumber(now_us)
end
local now_ms = (now_us - now_us % 1000) / 1000
local min_ttl = tonumber(ARGV[2])
local cost = tonumber(ARGV[3])
local max_delay = ARGV[4] ~= '' and tonumber(ARGV[4])
local n = tonumber(ARGV[5])

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

local function num(key, v)
  if not v then return 0 end
  if not string.find(v, '^%-?%d+$') then
    error('sluice: ' .. key .. ' holds ' .. v .. ', not an integer count')
  end
  v = tonumber(v)
  if v < 0 then return 0 end -- a take-back that landed after its key vanished
  return v
end

local KIND, COUNT, A, B = {}, {}, {}, {}
local START, CUR, PREV, NEXT = {}, {}, {}, {}
local never = false
for i = 1, n do
  local j = 6 + 4 * (i - 1)
  KIND[i], COUNT[i], A[i], B[i] = tonumber(ARGV[j]), tonumber(ARGV[j + 1]), tonumber(ARGV[j + 2]), tonumber(ARGV[j + 3])
  local base = KEYS[i]
  if KIND[i] == 2 then
    START[i], CUR[i], PREV[i], NEXT[i] = num(base, redis.call('GET', base)), 0, 0, 0
    if B[i] < 0 then never = true end
  else
    local w = A[i]
    local s = now_ms - now_ms % w
    local ks = {base .. ':' .. string.format('%d', s), base .. ':' .. string.format('%d', s + w)}
    if KIND[i] == 1 then ks[3] = base .. ':' .. string.format('%d', s - w) end
    local v = redis.call('MGET', unpack(ks))
    START[i], CUR[i], NEXT[i] = s, num(ks[1], v[1]), num(ks[2], v[2])
    PREV[i] = 0
    if KIND[i] == 1 then PREV[i] = num(ks[3], v[3]) end
    if cost > COUNT[i] then never = true end
  end
end

local reply = {0, now_us, -1}
for i = 1, n do
  local o = 3 + 4 * (i - 1)
  reply[o + 1], reply[o + 2], reply[o + 3], reply[o + 4] = START[i], CUR[i], PREV[i], NEXT[i]
end
if never then return reply end

-- admits returns the first ms, not before from_ms, of the window starting
-- at start (count cur, previous count prev) at which limit i admits the
-- cost, or nil.
local function admits(i, start, cur, prev, from_ms)
  local w = A[i]
  local free = COUNT[i] - cost - cur
  if free < 0 then return nil end
  local e = math.max(from_ms - start, 0)
  if KIND[i] == 1 and prev > 0 then
    local most = floordiv(free * w, prev)
    if most < w then e = math.max(e, w - most) end
  end
  if e >= w then return nil end
  return start + e
end

-- earliest returns the earliest moment (us) at or after t at which limit
-- i admits the cost, or nil and the moment its horizon moves.
local function earliest(i, t)
  if KIND[i] == 2 then
    return math.max(t, START[i] + B[i] - A[i])
  end
  local w = A[i]
  local t_ms = (t - t % 1000) / 1000
  local nxt = START[i] + w
  if t_ms < nxt then
    local e = admits(i, START[i], CUR[i], PREV[i], t_ms)
    if e then return math.max(t, e * 1000) end
  end
  if t_ms < nxt + w then
    -- The current window weighs on the next as if it ended full.
    local e = admits(i, nxt, NEXT[i], math.max(CUR[i], COUNT[i]), t_ms)
    if e then return math.max(t, e * 1000) end
  end
  return nil, nxt * 1000
end

local t = now_us
for round = 0, 4 * n + 5 do
  local nt = t
  for i = 1, n do
    local e, retry = earliest(i, t)
    if not e then
      reply[3] = retry
      return reply
    end
    nt = math.max(nt, e)
  end
  if nt == t then break end
  t = nt
  if round == 4 * n + 5 then
    reply[3] = t
    return reply
  end
end
reply[3] = t
if max_delay and t - now_us > max_delay then return reply end

-- The keys to write, each once (limits of one window share a counter).
local WK, WV, mark, seen = {}, {}, {}, {}
local t_ms = (t - t % 1000) / 1000
for i = 1, n do
  local base = KEYS[i]
  if KIND[i] == 2 then
    mark[i] = math.max(START[i], t) + B[i]
    if not seen[base] then
      seen[base] = true
      WK[#WK + 1], WV[#WV + 1] = base, i
    end
  else
    local s = START[i]
    if t_ms >= s + A[i] then s = s + A[i] end
    mark[i] = s
    local key = base .. ':' .. string.format('%d', s)
    if not seen[key] then
      seen[key] = true
      WK[#WK + 1], WV[#WV + 1] = key, i
    end
  end
end
-- MGET reads a key of another type as absent: find it before writing.
for x = 1, #WK do
  if redis.call('EXISTS', WK[x]) == 1 and redis.call('TYPE', WK[x]).ok ~= 'string' then
    error('WRONGTYPE ' .. WK[x] .. ' holds a ' .. redis.call('TYPE', WK[x]).ok .. ', not a count')
  end
end
for x = 1, #WK do
  local key, i = WK[x], WV[x]
  if KIND[i] == 2 then
    local ttl = math.max(math.ceil((mark[i] - now_us) / 1000) + 1, min_ttl, 1)
    redis.call('SET', key, string.format('%d', mark[i]), 'PX', string.format('%d', ttl))
  else
    local v = redis.call('INCRBY', key, cost)
    if v <= cost then
      -- Two windows from the one counted in, and the slack of take.lua.
      local ttl = math.max(mark[i] + 2 * A[i] + 1000 - now_ms, min_ttl, 1)
      redis.call('PEXPIRE', key, string.format('%d', ttl))
    end
  end
end
reply[1] = 1
for i = 1, n do reply[3 + 4 * n + i] = mark[i] end
return reply
