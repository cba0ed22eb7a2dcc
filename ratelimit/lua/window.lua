-- Window alignment, for the fixed and sliding windows (after prelude.lua).

-- Nanoseconds since the start of the current aligned window of P ns (P_sec
-- whole seconds, or 0 when P is not whole seconds): windows are aligned to
-- the Unix epoch, as time.Time.Truncate aligns them for periods that divide
-- a day.
local function window_offset(P, P_sec)
  if P_sec > 0 then return math.fmod(now_s, P_sec) * 1e9 + now_ns end
  local r = math.fmod(now_s, P)
  for _ = 1, 9 do r = math.fmod(r * 10, P) end
  return math.fmod(r + now_ns, P)
end
