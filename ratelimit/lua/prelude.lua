-- Shared head of every loadshed rate-limit script (the Go side prepends it).
--
-- KEYS[1]  the limit's state for one user key (all keys of one decision
--          share a {hash tag}, so the script works on Redis Cluster).
-- ARGV[1]  op: "a" take units, "r" refund units, "p" peek (answer as "a"
--          would, writing nothing); from a test's fixed clock
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
-- Every figure is a string to convert, and conversions are much of a
-- lean script's cost on Redis 7: x + 0 converts as tonumber(x) does at
-- half its cost (0.05 against 0.1 µs: no function call), and the usual
-- figures (take_max = want, a slack of 1 ms) are recognised as strings,
-- which Lua compares by reference.
local want = ARGV[2] + 0
local take_max = want
if ARGV[3] ~= ARGV[2] then take_max = ARGV[3] + 0 end
local slack = 1
if ARGV[4] ~= '1' then slack = ARGV[4] + 0 end
-- now_sec: the whole seconds as the server wrote them, which a script may
-- store as they are rather than format now_s again (0.26 µs).
local now_s, now_ns, now_sec
if #op == 1 then
  local t = redis.call('TIME')
  now_sec = t[1]
  now_s = now_sec + 0
  now_ns = t[2] * 1000
else
  local o, s, n = string.match(op, '^(%a) (%d+) (%d+)$')
  op, now_s, now_ns = o, tonumber(s), tonumber(n)
  now_sec = now_s .. ''
end
