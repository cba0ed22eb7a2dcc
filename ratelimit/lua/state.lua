-- State kept as one string (after prelude.lua and div.lua): for the
-- buckets and the sliding window (the fixed window keeps its own, leaner).
--
-- The state of the buckets and windows is one string of integers separated
-- by spaces ("%d %d ..."): one GET to read it, one SET ... PX to write it
-- with its TTL. Each script parses it with one string.match.

-- A stored instant (whole seconds s, nanoseconds n past s) as nanoseconds
-- relative to now.
local function rel(s, n) return (tonumber(s) - now_s) * 1e9 + tonumber(n) - now_ns end

-- Store value for ns more nanoseconds (plus slack), or drop the key when it
-- holds nothing worth keeping.
local function save(ns, value)
  if ns <= 0 then
    redis.call('DEL', key)
  else
    redis.call('SET', key, value, 'PX', cdiv(ns, 1e6) + slack)
  end
end
