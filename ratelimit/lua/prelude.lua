-- Shared head of every loadshed rate-limit script (the Go side prepends it).
--
-- KEYS[1]  the limit's state for one user key (all keys of one decision
--          share a {hash tag}, so the script works on Redis Cluster).
-- ARGV[1]  op: "a" take units, "r" refund units
-- ARGV[2]  want: the request's cost (the least that may be taken)
-- ARGV[3]  take_max: the most that may be taken (= want, or a batch chunk)
-- ARGV[4]  quantity per period
-- ARGV[5]  burst (token and leaky bucket)
-- ARGV[6]  period in nanoseconds
-- ARGV[7]  period in whole seconds, or 0 when it is not a whole number
-- ARGV[8]  emission interval in nanoseconds (Limit.Interval: buckets)
-- ARGV[9]  TTL slack in milliseconds added to every PEXPIRE
-- ARGV[10] now, seconds ("" to read the server's TIME: the normal case)
-- ARGV[11] now, nanoseconds within the second
--
-- Replies {allowed, taken, remaining, retry_ns, reset_ns, retry1_ns}, where
-- retry1_ns is how long until a single unit would be admitted.
--
-- Lua numbers are doubles: every figure here is kept below 2^53 by working
-- in nanoseconds relative to now, and every number written back to Redis is
-- formatted by hand, because redis.call would format it with %.14g.
-- (removed)

local key = KEYS[1]
local op = ARGV[1]
local want = tonumber(ARGV[2])
local take_max = tonumber(ARGV[3])
local Q = tonumber(ARGV[4])
local B = tonumber(ARGV[5])
local P = tonumber(ARGV[6])
local P_sec = tonumber(ARGV[7])
local T = tonumber(ARGV[8])
local slack = tonumber(ARGV[9])
local now_s, now_ns
if ARGV[10] == '' then
  local t = redis.call('TIME')
  now_s = tonumber(t[1])
  now_ns = tonumber(t[2]) * 1000
else
  now_s = tonumber(ARGV[10])
  now_ns = tonumber(ARGV[11])
end

local function num(x) return string.format('%.17g', x) end

-- floor(x / y) for integers below 2^53, immune to the rounding of x / y.
local function idiv(x, y)
  local q = math.floor(x / y)
  if q * y > x then q = q - 1 elseif (q + 1) * y <= x then q = q + 1 end
  return q
end

local function cdiv(x, y) return -idiv(-x, y) end

local two53 = 9007199254740992

-- floor(a * b / c) and the remainder, for non-negative integers, exact even
-- when a * b passes 2^53, provided c < 2^52 and the quotient is below 2^53:
-- long multiplication over the bits of b, keeping the remainder below c.
local function muldiv(a, b, c)
  if a * b < two53 then
    local q = idiv(a * b, c)
    return q, a * b - q * c
  end
  local qa = idiv(a, c)
  local ra = a - qa * c
  local q, r = 0, 0
  local bit = 1
  while bit * 2 <= b do bit = bit * 2 end
  local rest = b
  while bit >= 1 do
    q, r = q * 2, r * 2
    if r >= c then r, q = r - c, q + 1 end
    if rest >= bit then
      rest = rest - bit
      r = r + ra
      if r >= c then r, q = r - c, q + 1 end
    end
    bit = bit / 2
  end
  return qa * b + q, r
end

-- A stored instant (whole seconds s, nanoseconds n past s) as nanoseconds
-- relative to now.
local function rel(s, n) return (tonumber(s) - now_s) * 1e9 + tonumber(n) - now_ns end

-- Nanoseconds since the start of the current aligned window (windows are
-- aligned to the Unix epoch, as time.Time.Truncate aligns them for periods
-- that divide a day).
local function window_offset()
  if P_sec > 0 then return math.fmod(now_s, P_sec) * 1e9 + now_ns end
  local r = math.fmod(now_s, P)
  for _ = 1, 9 do r = math.fmod(r * 10, P) end
  return math.fmod(r + now_ns, P)
end

-- The state of the buckets and windows is one string of integers separated
-- by spaces ("%d %d ..."): one GET to read it, one SET ... PX to write it
-- with its TTL. Each script parses it with one string.match.

-- Store value for ns more nanoseconds (plus slack), or drop the key when it
-- holds nothing worth keeping.
local function save(ns, value)
  if ns <= 0 then
    redis.call('DEL', key)
  else
    redis.call('SET', key, value, 'PX', cdiv(ns, 1e6) + slack)
  end
end
