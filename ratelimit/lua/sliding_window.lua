-- Sliding window counter: the current aligned window's count plus the
-- previous window's, weighted by how much of it the last P still covers.
-- Q, P, off and left come from window.lua.
-- "s n c p": the window's start, its count, the previous window's count.
local v = redis.call('GET', key)
local cur, prev = 0, 0
local rolled = false -- the stored window is the previous one
if v then
  local s, n, c, p = string.match(v, '^(%S+) (%S+) (%S+) (%S+)$')
  local start = rel(s, n)
  if start == -off then
    cur = tonumber(c)
    prev = tonumber(p)
  elseif start == -off - P then
    prev = tonumber(c)
    rolled = true
  end
end

-- The current count weighs until the next window ends, the previous one
-- until this one ends.
local function store()
  local ttl = 0
  if cur > 0 then ttl = left + P elseif prev > 0 then ttl = left end
  save(ttl, string.format('%d %d %d %d', now_s, now_ns - off, cur, prev))
end

-- A refund comes out of the current window, or out of the previous one
-- when it was taken just before the window turned.
if op == 'r' then
  if cur > 0 then
    cur = math.max(cur - want, 0)
    store()
  elseif rolled and prev > 0 then
    prev = math.max(prev - want, 0)
    store()
  end
  return {1, 0, 0, 0, 0, 0}
end

-- ceil(prev * t / P): the previous window's weight over the next t ns.
local function cdiv_prev(t)
  local q, r = muldiv(prev, t, P)
  if r > 0 then q = q + 1 end
  return q
end

-- Units admissible now: Q - cur - ceil(prev * left / P).
local free = Q - cur - cdiv_prev(left)

-- How long until n units fit.
local function wait_for(n)
  if cur + n <= Q then
    if prev == 0 then return 0 end
    local t = left - muldiv(Q - cur - n, P, prev)
    if t < 0 then t = 0 end
    return t
  end
  -- Only after this window ends, when cur becomes the previous window.
  local t = P - muldiv(Q - n, P, cur)
  if t < 0 then t = 0 end
  return left + t
end

local take = math.min(take_max, free)
if take >= want then
  cur = cur + take
  if op ~= 'p' then store() end
  local remaining = free - take
  local retry1 = 0
  if remaining < 1 then retry1 = wait_for(1) end
  return {1, take, remaining, 0, left + P, retry1}
end
if free < 0 then free = 0 end
local reset = 0
if cur > 0 then reset = left + P elseif prev > 0 then reset = left end
local retry1 = 0
if free < 1 then retry1 = wait_for(1) end
return {0, 0, free, wait_for(want), reset, retry1}
