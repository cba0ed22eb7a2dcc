-- Shared head of every loadshed rate-limit script (the Go side prepends it).
--
-- KEYS[1]  the limit's state for one user key (all keys of one decision
--          share a {hash tag}, so the script works on Redis Cluster).
-- ARGV[1]  op: "a" take units, "r" refund units; from a test's fixed clock
--          only, "<op> <seconds> <nanoseconds>": the instant to use instead
--          of the server's TIME
-- ARGV[2]  want: the request's cost (the least that may be taken)
-- ARGV[3]  take_max: the most that may be taken (= want, or a batch chunk)
-- ARGV[4]  TTL slack in milliseconds added to every expiry
-- ARGV[5…] the algorithm's figures, named at the top of its body
--
-- Replies {allowed, taken, remaining, retry_ns, reset_ns, retry1_ns}, where
-- retry1_ns is how long until a single unit would be admitted (the fixed
-- window answers its common case with one integer: see there).
--
-- Lua numbers are doubles: every figure here is kept below 2^53 by working
-- in nanoseconds relative to now, and every number written back to Redis is
-- formatted by hand, because redis.call would format it with %.14g.
--
-- Each call runs the whole script, and every local function is a closure
-- made afresh: the Go side assembles each algorithm's script from only the
-- pieces it uses (this prelude, then div.lua, state.lua, window.lua,
-- muldiv.lua as needed, then the body), and the arguments are only those
-- it reads.

-- TIME then a write needs effect replication: the default since Redis 5,
-- asked for on older servers.
if redis.replicate_commands then redis.replicate_commands() end

local key = KEYS[1]
local op = ARGV[1]
local want = tonumber(ARGV[2])
local take_max = tonumber(ARGV[3])
local slack = tonumber(ARGV[4])
local now_s, now_ns
if #op == 1 then
  local t = redis.call('TIME')
  now_s = tonumber(t[1])
  now_ns = tonumber(t[2]) * 1000
else
  local o, s, n = string.match(op, '^(%a) (%d+) (%d+)$')
  op, now_s, now_ns = o, tonumber(s), tonumber(n)
end
