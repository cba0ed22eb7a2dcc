-- One tick of one instance: publish its counts, drop the entries of
-- instances that stopped publishing, and read the fleet's totals back.
--
-- KEYS[1] entries: hash, instance id -> "nonce c1 c2 c3 c4" (units in flight
--         by priority, lowest first)
-- KEYS[2] expiry:  sorted set, instance id scored by when its entry expires
--         (ms, the server's clock)
-- KEYS[3] totals:  hash, "1".."4" -> the sum of the live entries' counts
-- ARGV[1] instance id, ARGV[2] TTL in ms (0: leave the fleet),
-- ARGV[3] nonce, ARGV[4..7] counts
--
-- Reply: {now ms, live instances, collided (0/1), total 1..4}
--
-- Totals are kept incrementally, so a tick costs O(log N + expired), not
-- O(N) in the number of instances.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[2])

local function counts(v)
  local c, i = {}, 0
  for w in string.gmatch(v, '%S+') do
    if i > 0 then c[i] = tonumber(w) or 0 end
    i = i + 1
  end
  return c
end

local function add(v, sign)
  local c = counts(v)
  for i = 1, 4 do
    local n = c[i] or 0
    if n ~= 0 then redis.call('HINCRBY', KEYS[3], i, sign * n) end
  end
end

local gone = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now)
for _, id in ipairs(gone) do
  local v = redis.call('HGET', KEYS[1], id)
  if v then
    add(v, -1)
    redis.call('HDEL', KEYS[1], id)
  end
end
if #gone > 0 then redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now) end

local collided = 0
local old = redis.call('HGET', KEYS[1], ARGV[1])
if old then
  if string.match(old, '^%S+') ~= ARGV[3] then collided = 1 end
  add(old, -1)
end
if ttl > 0 then
  local v = ARGV[3] .. ' ' .. ARGV[4] .. ' ' .. ARGV[5] .. ' ' .. ARGV[6] .. ' ' .. ARGV[7]
  redis.call('HSET', KEYS[1], ARGV[1], v)
  add(v, 1)
  redis.call('ZADD', KEYS[2], now + ttl, ARGV[1])
elseif old then
  redis.call('HDEL', KEYS[1], ARGV[1])
  redis.call('ZREM', KEYS[2], ARGV[1])
end

local live = redis.call('ZCARD', KEYS[2])
if live == 0 then
  redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
  return {now, 0, collided, 0, 0, 0, 0}
end

local tot = redis.call('HMGET', KEYS[3], '1', '2', '3', '4')
local bad = false
for i = 1, 4 do
  tot[i] = tonumber(tot[i]) or 0
  if tot[i] < 0 then bad = true end
end
if bad then
  -- The totals lost track of the entries (evicted under maxmemory, or
  -- edited by hand): count them again from the entries.
  tot = {0, 0, 0, 0}
  local all = redis.call('HGETALL', KEYS[1])
  for j = 2, #all, 2 do
    local c = counts(all[j])
    for i = 1, 4 do tot[i] = tot[i] + (c[i] or 0) end
  end
  redis.call('DEL', KEYS[3])
  redis.call('HSET', KEYS[3], '1', tot[1], '2', tot[2], '3', tot[3], '4', tot[4])
end

-- The key set lives exactly as long as its newest entry: a fleet that is
-- gone leaves nothing behind.
local last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
local at = tonumber(last[2])
redis.call('PEXPIREAT', KEYS[1], at)
redis.call('PEXPIREAT', KEYS[2], at)
redis.call('PEXPIREAT', KEYS[3], at)
return {now, live, collided, tot[1], tot[2], tot[3], tot[4]}
