-- inspect.lua: read counters without changing them, for Peek, Inspect
-- and admin APIs, with the server's clock in the same atomic step.
--
-- KEYS     the keys to read, all of one hash tag (one Cluster slot): window
--          counts "<base>:<start>" and token-bucket TATs "<base>" (see
--          take.lua for the layout).
-- ARGV     none.
--
-- Reply: { time_s, time_us, v_1, ..., v_n } as strings: Redis TIME (seconds
-- and microseconds within the second), then the value of each key, "" for
-- a key that does not exist.

local tm = redis.call('TIME')
local out = { tm[1], tm[2] }
for i = 1, #KEYS do
  local v = redis.call('GET', KEYS[i])
  if v then
    out[#out + 1] = v
  else
    out[#out + 1] = ''
  end
end
return out
