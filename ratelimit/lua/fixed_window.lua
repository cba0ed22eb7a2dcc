-- Fixed window (after prelude.lua and window.lua): a count for the current
-- aligned window, stored as "s n c": the window's start, as whole seconds s
-- and 0 <= n < 1e9 nanoseconds past them, and the count. Every call in a
-- window writes its start the same way, so it is compared as a string; a
-- count stored for any other window is stale and reads as zero.
--
-- The most used algorithm, kept lean: no local function (each a closure
-- made afresh on every call), no state.lua, no string.match on the common
-- path, and as few conversions between numbers and strings as the answer
-- allows (each costs 0.05-0.27 µs; see prelude.lua). That took the script
-- from 6.2 to 3.7 µs a call on Redis alone (docs/benchmarks.md).
local id
if P_sec == 1 then
  -- The start is this very second, as the server wrote it.
  id = now_sec .. ' 0 '
elseif P_sec > 0 then
  id = string.format('%d 0 ', now_s - off_s)
else
  local ws, wn = now_s, now_ns - off
  if wn < 0 then
    -- ceil(-wn / 1e9), exact: the quotient's rounding is corrected.
    local c = math.ceil(-wn / 1e9)
    if wn + (c - 1) * 1e9 >= 0 then c = c - 1 elseif wn + c * 1e9 < 0 then c = c + 1 end
    ws, wn = ws - c, wn + c * 1e9
  end
  id = string.format('%d %d ', ws, wn)
end
local count = 0
local v = redis.call('GET', key)
if v then
  if string.find(v, id, 1, true) == 1 then
    count = string.sub(v, #id + 1) + 0
  else
    -- Stale, or written by a version that stored the start as the
    -- writer's second and an offset from it: the same instant, other
    -- figures.
    local s, n, c = string.match(v, '^(%S+) (%S+) (%S+)$')
    if c and (tonumber(s) - now_s) * 1e9 + tonumber(n) - now_ns == -off then count = tonumber(c) end
  end
end

-- A refund gives back to this window's count, an admission takes from it;
-- either writes it below.
local take = 0
if op == 'r' then
  if count <= 0 then return {1, 0, 0, 0, 0, 0} end
  count = count - want
else
  local free = Q - count
  take = take_max
  if free < take then take = free end
  if take < want then
    local reset = 0
    if count > 0 then reset = left end
    local retry1 = 0
    if free < 1 then retry1 = left end
    -- A limit lowered since the units were taken can leave more than Q.
    if free < 0 then free = 0 end
    return {0, 0, free, left, reset, retry1}
  end
  count = count + take
end

-- Kept until the window ends, or dropped once empty (nothing to keep, and
-- nothing to reset). Numbers are written with string.format's %d: a
-- number concatenated is formatted in %.14g, which rounds from 1e14 and
-- costs half as much again (0.27 against 0.18 µs).
if op == 'p' then
  -- A peek answers as the admission would, and writes nothing.
elseif count > 0 then
  redis.call('SET', key, id .. string.format('%d', count), 'PX', math.ceil(left / 1e6) + slack)
else
  redis.call('DEL', key)
  left = 0
end
if op == 'r' then return {1, 0, 0, 0, 0, 0} end

-- The common answer, admitted and all taken that could be, as one
-- integer: remaining * (P + 1) + left, exact below 2^52 (ratelimit's
-- unpack). An array costs the server 0.7 µs more, an eighth of the
-- script; the caller knows what it took, and retry1 follows.
local remaining = Q - count
local packed = remaining * (P + 1) + left
if take == take_max and packed < 4503599627370496 then return packed end
local retry1 = 0
if remaining < 1 then retry1 = left end
return {1, take, remaining, 0, left, retry1}
