-- Admits a lease if every sorted set has room for it.
--
-- KEYS: the sets (per key first, then overall), all in one hash slot.
-- ARGV: member, cost, TTL in ms, then each set's bound.
-- Returns {1, counts...} after adding, or {0, i, count} when set i had no
-- room.
--
-- Idempotent: go-redis re-sends a script whose reply was lost (a
-- connection cut after Redis ran it), so a member already present is this
-- same acquire run again: it is refreshed and reported admitted, never
-- counted against the limit it already holds a place in.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local member, cost, ttl = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local counts = {1}
for _, k in ipairs(KEYS) do
  redis.call('ZREMRANGEBYSCORE', k, '-inf', now)
end
local again = redis.call('ZSCORE', KEYS[1], member)
for i, k in ipairs(KEYS) do
  local n = redis.call('ZCARD', k)
  if not again then
    if n + cost > tonumber(ARGV[3 + i]) then
      return {0, i, n}
    end
    n = n + cost
  end
  counts[i + 1] = n
end
-- In chunks: unpack has a limit on how many values it spreads.
for j0 = 1, cost, 1000 do
  local members = {}
  for j = j0, math.min(cost, j0 + 999) do
    members[#members + 1] = now + ttl
    members[#members + 1] = (j == 1) and member or (member .. '#' .. j)
  end
  for _, k in ipairs(KEYS) do
    redis.call('ZADD', k, unpack(members))
  end
end
for _, k in ipairs(KEYS) do
  if redis.call('PTTL', k) < ttl then
    redis.call('PEXPIRE', k, ttl)
  end
end
return counts
