-- Raise a fence counter to at least a value (never lower it).
-- KEYS[1] fence counter; ARGV[1] the floor (decimal, no sign or leading zeros). Used by
-- Redlock: a holder that won a quorum lifts every master's counter to its token, so any
-- later quorum, which shares at least one master with this one, draws a larger token.
-- Tokens reach 2^63 - 1, past a Lua number's exact range: they are compared as strings.
-- Returns the counter after the call (a decimal string).
local current = redis.call('get', KEYS[1]) or '0'
local floor = ARGV[1]
if #current < #floor or (#current == #floor and current < floor) then
  redis.call('set', KEYS[1], floor)
  return floor
end
return current
