-- Token bucket and leaky bucket (GCRA): one theoretical arrival time (TAT)
-- per key, the instant the bucket will be full again, stored as "s n"
-- (seconds, nanoseconds past them). T is the emission interval,
-- Period/Quantity rounded up to a nanosecond as the in-memory store rounds
-- it, so both stores give the same figures; tau = Burst * T.
local tau = ARGV[5] + 0
local T = ARGV[6] + 0
local v = redis.call('GET', key)
local tat = 0
if v then
  local s, n = string.match(v, '^(%S+) (%S+)$')
  tat = rel(s, n)
end
if tat < 0 then tat = 0 end

-- The TTL is the TAT itself: once it has passed the bucket is full, as a
-- missing key reads.
local function store() save(tat, string.format('%d %d', now_s, tat + now_ns)) end

if op == 'r' then
  if tat > 0 then
    tat = tat - want * T
    if tat < 0 then tat = 0 end
    store()
  end
  return {1, 0, 0, 0, 0, 0}
end

local free = idiv(tau - tat, T)
local take = math.min(take_max, free)
if take >= want then
  tat = tat + take * T
  if op ~= 'p' then store() end
  local remaining = free - take
  local retry1 = 0
  if remaining < 1 then retry1 = tat + T - tau end
  return {1, take, remaining, 0, tat, retry1}
end
if free < 0 then free = 0 end
local retry1 = 0
if free < 1 then retry1 = tat + T - tau end
return {0, 0, free, tat + want * T - tau, tat, retry1}
