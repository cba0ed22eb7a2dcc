-- Fixed window: a count for the current aligned window, stored as "s n c"
-- (the window's start, the count); a count stored for any earlier window is
-- stale and reads as zero.
-- Q units per P ns (P_sec whole seconds, or 0).
local Q = tonumber(ARGV[5])
local P = tonumber(ARGV[6])
local P_sec = tonumber(ARGV[7])
local off = window_offset(P, P_sec)
local left = P - off
local v = redis.call('GET', key)
local count = 0
if v then
  local s, n, c = string.match(v, '^(%S+) (%S+) (%S+)$')
  if rel(s, n) == -off then count = tonumber(c) end
end

-- Kept until the window ends, or dropped once empty.
local function store()
  if count <= 0 then left = 0 end
  save(left, string.format('%d %d %d', now_s, now_ns - off, count))
end

if op == 'r' then
  if count > 0 then
    count = math.max(count - want, 0)
    store()
  end
  return {1, 0, 0, 0, 0, 0}
end

local free = Q - count
local take = math.min(take_max, free)
if take >= want then
  count = count + take
  store()
  local remaining = Q - count
  local retry1 = 0
  if remaining < 1 then retry1 = left end
  return {1, take, remaining, 0, left, retry1}
end
local reset = 0
if count > 0 then reset = left end
local retry1 = 0
if free < 1 then retry1 = left end
-- A limit lowered since the units were taken can leave more than Q.
if free < 0 then free = 0 end
return {0, 0, free, left, reset, retry1}
