-- Fixed window: a count for the current aligned window; a count stored for
-- any earlier window is stale and reads as zero.
local off = window_offset()
local left = P - off
local h = redis.call('HMGET', key, 's', 'n', 'c')
local count = 0
if h[1] and rel(h[1], h[2]) == -off then count = tonumber(h[3]) end

local function store()
  if count <= 0 then
    redis.call('DEL', key)
    return
  end
  redis.call('HSET', key, 's', num(now_s), 'n', num(now_ns - off), 'c', num(count))
  keep_for(left)
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
return {0, 0, free, left, reset, retry1}
