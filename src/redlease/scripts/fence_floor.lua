-- Raise a fence counter to at least a value (never lower it).
-- KEYS[1] fence counter; ARGV[1] the floor. Used by Redlock: a holder that won a quorum
-- lifts every master's counter to its token, so any later quorum, which shares at least
-- one master with this one, draws a larger token there.
-- Returns the counter after the call.
local current = tonumber(redis.call('get', KEYS[1]) or '0')
local floor = tonumber(ARGV[1])
if current < floor then
  redis.call('set', KEYS[1], ARGV[1])
  return floor
end
return current
