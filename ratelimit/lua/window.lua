-- The windows' figures and alignment, for the fixed and sliding windows
-- (after prelude.lua): Q units per P ns (P_sec whole seconds, or 0 when P
-- is not whole seconds).
local Q = ARGV[5] + 0
local P_sec = ARGV[7] + 0
local P
if P_sec > 0 then P = P_sec * 1e9 else P = ARGV[6] + 0 end

-- off: nanoseconds since the start of the current aligned window; windows
-- are aligned to the Unix epoch, as time.Time.Truncate aligns them for
-- periods that divide a day. off_s: its whole seconds when P is whole
-- seconds (the window then starts at now_s - off_s), else 0. left:
-- nanoseconds until it ends. Straight code rather than a function: each
-- local function is a closure made afresh on every call.
local off, off_s = 0, 0
if P_sec > 0 then
  off_s = math.fmod(now_s, P_sec)
  off = off_s * 1e9 + now_ns
else
  local r = math.fmod(now_s, P)
  for _ = 1, 9 do r = math.fmod(r * 10, P) end
  off = math.fmod(r + now_ns, P)
end
local left = P - off
