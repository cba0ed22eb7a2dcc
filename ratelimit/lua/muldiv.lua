-- muldiv, for the sliding window (after div.lua, which defines idiv).

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
