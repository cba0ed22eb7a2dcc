-- Integer division, exact below 2^53 (after prelude.lua).

-- floor(x / y) for integers below 2^53, immune to the rounding of x / y.
local function idiv(x, y)
  local q = math.floor(x / y)
  if q * y > x then q = q - 1 elseif (q + 1) * y <= x then q = q + 1 end
  return q
end

local function cdiv(x, y) return -idiv(-x, y) end
