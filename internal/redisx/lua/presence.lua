-- Presence: one sorted set of the live instances of a layer's namespace,
-- each member an instance id scored by the millisecond it expires (server
-- time). Refreshing is idempotent, so a retried run does no harm.
--
-- KEYS[1] the set; ARGV[1] this instance's id, ARGV[2] TTL in ms, ARGV[3]
-- "1" to refresh, "0" to leave. Returns the live instances.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[2])
if ARGV[3] == '1' then
  redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
else
  redis.call('ZREM', KEYS[1], ARGV[1])
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('PEXPIRE', KEYS[1], ttl)
return redis.call('ZCARD', KEYS[1])
