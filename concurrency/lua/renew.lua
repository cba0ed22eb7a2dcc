-- Pushes back the expiry of leases still present, and never brings back one
-- that is gone (so a retried run is harmless).
--
-- KEYS: the sets the leases share. ARGV: TTL in ms, then member and cost
-- pairs. Returns the members that were gone.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[1])
local gone = {}
for i = 2, #ARGV, 2 do
  local member, cost = ARGV[i], tonumber(ARGV[i + 1])
  for _, k in ipairs(KEYS) do
    local s = redis.call('ZSCORE', k, member)
    if s and tonumber(s) > now then
      redis.call('ZADD', k, 'XX', now + ttl, member)
      for j = 2, cost do redis.call('ZADD', k, 'XX', now + ttl, member .. '#' .. j) end
    elseif k == KEYS[1] then
      gone[#gone + 1] = member
    end
  end
end
for _, k in ipairs(KEYS) do
  if redis.call('PTTL', k) < ttl then redis.call('PEXPIRE', k, ttl) end
end
return gone
