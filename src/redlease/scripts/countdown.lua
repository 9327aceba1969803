-- A count-down latch: waiters are released when the count reaches zero.
-- KEYS[1] the count (integer); ARGV[1] op: 'set' | 'down' | 'get';
-- ARGV[2] the count to set; ARGV[3] 'publish' or 'spublish'; ARGV[4] the channel waiters
-- listen on; ARGV[5] ttl in ms of the count (0 = none)
-- set returns 1 if the count was set, 0 if a count already exists; down returns the count
-- left (never below 0); get returns the count (0 when none is set: nothing to wait for);
-- every op returns {-1, type, 1} when KEYS[1] holds another program's value (another type,
-- or a string that is no integer), and leaves it as found.
-- Whether 'value' is a count: a whole number from 0 to 2^53 - 1 (a Lua number is exact up
-- to there), written as Redis writes one (no sign, no leading zero).
local function exact_count(value)
  local digits = string.match(value, '^%d+$')
  if not digits or (#digits > 1 and string.sub(digits, 1, 1) == '0') then
    return false
  end
  return #digits < 16 or (#digits == 16 and digits <= '9007199254740991')
end

local op = ARGV[1]
local found = redis.call('type', KEYS[1]).ok
if found ~= 'none' then
  if found ~= 'string' then
    return {-1, found, 1}
  end
  if not exact_count(redis.call('get', KEYS[1])) then
    return {-1, 'string that is not an integer', 1}
  end
end
if op == 'set' then
  local ok
  if tonumber(ARGV[5]) > 0 then
    ok = redis.call('set', KEYS[1], ARGV[2], 'NX', 'PX', ARGV[5])
  else
    ok = redis.call('set', KEYS[1], ARGV[2], 'NX')
  end
  if ok and tonumber(ARGV[2]) <= 0 then
    redis.call('del', KEYS[1])
    redis.call(ARGV[3], ARGV[4], '0')
  end
  return ok and 1 or 0
end
local count = tonumber(redis.call('get', KEYS[1]) or '0')
if op == 'down' and count > 0 then
  count = redis.call('decr', KEYS[1])
  if count <= 0 then
    redis.call('del', KEYS[1])
    redis.call(ARGV[3], ARGV[4], '0')
  end
end
return count
