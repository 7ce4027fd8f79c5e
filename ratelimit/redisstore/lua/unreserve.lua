-- unreserve.lua: give back what a reservation took
-- (ratelimit.Reserver.Unreserve), as storekit.Unreserve does: a window's
-- count drops by the cost (not below zero); a token bucket's TAT moves
-- back by the increment less what was taken after the reservation. Go
-- has checked that the reserved moment has not passed.
--
-- KEYS     the base key of every limit, in order, as for reserve.lua
-- ARGV[1]  cost (>= 1)
-- ARGV[2]  number of limits n
-- then 3 values per limit:
--   kind   0 fixed window, 1 sliding window, 2 token bucket
--   b      window: 0; bucket: the increment cost*T in us
--   mark   reserve.lua's mark: the window's start (Unix ms), or the
--          bucket's TAT after the reservation (Unix us)
--
-- Reply: the number of keys changed.

local cost = tonumber(ARGV[1])
local n = tonumber(ARGV[2])
local seen, changed = {}, 0
for i = 1, n do
  local j = 3 + 3 * (i - 1)
  local kind, inc, mark = tonumber(ARGV[j]), tonumber(ARGV[j + 1]), tonumber(ARGV[j + 2])
  local key = KEYS[i]
  if kind ~= 2 then key = key .. ':' .. string.format('%d', mark) end
  if not seen[key] then
    seen[key] = true
    local v = redis.call('GET', key)
    if v and string.find(v, '^%-?%d+$') then
      v = tonumber(v)
      if kind == 2 then
        local back = math.min(inc - (v - mark), inc)
        if back > 0 then
          redis.call('SET', key, string.format('%d', v - back), 'KEEPTTL')
          changed = changed + 1
        end
      elseif v > 0 then
        redis.call('DECRBY', key, string.format('%d', math.min(cost, v)))
        changed = changed + 1
      end
    end
  end
end
return changed
