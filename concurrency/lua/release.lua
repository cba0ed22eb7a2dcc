-- Removes a lease; removing one already gone does nothing, so a retried
-- run is harmless.
--
-- KEYS: the sets. ARGV: member, cost. Returns how many members it removed.
local member, cost = ARGV[1], tonumber(ARGV[2])
local n = 0
for j0 = 1, cost, 1000 do
  local members = {}
  for j = j0, math.min(cost, j0 + 999) do
    members[#members + 1] = (j == 1) and member or (member .. '#' .. j)
  end
  for _, k in ipairs(KEYS) do
    n = n + redis.call('ZREM', k, unpack(members))
  end
end
return n
