-- Sliding window log: a sorted set of admitted units scored by their time in
-- microseconds (the resolution of the server's TIME), one member per unit,
-- so it never holds more than Q members once the expired ones are gone.
-- An instant between two microseconds (only a test's fixed clock has them)
-- is stamped with the later one, so a unit never expires early.
-- Q units per P ns.
local Q = ARGV[5] + 0
local P = ARGV[6] + 0
local sub = math.fmod(now_ns, 1000)
local now_us = now_s * 1e6 + (now_ns - sub) / 1000
local stamp_us = now_us
if sub > 0 then stamp_us = now_us + 1 end
-- A unit stamped t (µs) has expired once t*1000 <= now - P.
local cutoff = now_us + idiv(sub - P, 1000)
redis.call('ZREMRANGEBYSCORE', key, '-inf', string.format('%.0f', cutoff))
local count = redis.call('ZCARD', key)

-- Nanoseconds from now until the unit stamped t (µs) expires.
local function expires_in(t) return (t - now_us) * 1000 - sub + P end

if op == 'r' then
  if count > 0 then redis.call('ZPOPMAX', key, math.min(want, count)) end
  return {1, 0, 0, 0, 0, 0}
end

-- Time until the k-th oldest unit expires.
local function wait_for_oldest(k)
  local e = redis.call('ZRANGE', key, k - 1, k - 1, 'WITHSCORES')
  return expires_in(tonumber(e[2]))
end

local free = Q - count
local take = math.min(take_max, free)
if take >= want and op == 'p' then
  -- A peek answers as the admission would, and adds nothing; its retry1 is
  -- not asked for (the oldest unit it would wait for is not in the log).
  return {1, take, free - take, 0, expires_in(stamp_us), 0}
end
if take >= want then
  -- The server's clock may step back: stamp no earlier than the newest unit,
  -- and number members after the newest one's so they never collide.
  local stamp, seq = stamp_us, 0
  local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  if last[1] then
    local t = tonumber(last[2])
    if t >= stamp then
      stamp = t
      seq = tonumber(string.match(last[1], ':(%d+)$')) or count
    end
  end
  local ts = string.format('%.0f', stamp)
  local i = 1
  while i <= take do
    local args = {}
    local j = 0
    while i <= take and j < 500 do
      args[2 * j + 1] = ts
      args[2 * j + 2] = ts .. ':' .. string.format('%010d', seq + i)
      i = i + 1
      j = j + 1
    end
    redis.call('ZADD', key, unpack(args))
  end
  count = count + take
  local reset = expires_in(stamp)
  redis.call('PEXPIRE', key, cdiv(reset, 1e6) + slack)
  local remaining = Q - count
  local retry1 = 0
  if remaining < 1 then retry1 = wait_for_oldest(count + 1 - Q) end
  return {1, take, remaining, 0, reset, retry1}
end
local reset = 0
if count > 0 then
  local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  reset = expires_in(tonumber(last[2]))
end
local retry1 = 0
if free < 1 then retry1 = wait_for_oldest(count + 1 - Q) end
-- A limit lowered since the units were taken can leave more than Q.
if free < 0 then free = 0 end
return {0, 0, free, wait_for_oldest(count + want - Q), reset, retry1}
