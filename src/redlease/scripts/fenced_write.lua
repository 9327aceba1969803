-- A write to a resource key that only a current lock holder can make: refuse a fencing
-- token older than the newest one this key has accepted, and an equal token from another
-- owner (a failover can lose the counter's last INCR and hand the same token out twice).
-- KEYS[1] the resource key, KEYS[2] its fence record: a hash {fence, owner} that never
-- expires (it must share KEYS[1]'s slot on a cluster: give the key a hash tag)
-- ARGV[1] writer's fence (decimal, no sign or leading zeros), ARGV[2] writer's owner token,
-- ARGV[3] the operation: 'set' (ARGV[4] value, ARGV[5] PX in ms or ''; like the others, it
--   refuses a key of another type rather than replace it),
--   'hset' (ARGV[4..] field, value, ...), 'incrby' (ARGV[4] amount),
--   'claim' (no write: only record the token, so older holders are refused from now on)
-- The write happens before the record is updated: a write that fails records nothing.
-- Returns {1, result} written (result: 1 for set and claim, HSET's new-field count,
--         INCRBY's value, as a decimal string past 2^53)
--       | {0, newest fence, 'older' | 'owner'} refused
--       | {-1, 1 | 2, type found} KEYS[1] or KEYS[2] holds a value of the wrong type (a
--         string that is not an integer, for incrby; a record whose fence is no token)
--       | {-3, 'overflow'} incrby would take the value past 64 bits; nothing written
local record_type = redis.call('type', KEYS[2])['ok']
if record_type ~= 'none' and record_type ~= 'hash' then
  return {-1, 2, record_type}
end
local expected = {set = 'string', hset = 'hash', incrby = 'string'}
local want = expected[ARGV[3]]
if want then
  local found = redis.call('type', KEYS[1])['ok']
  if found ~= 'none' and found ~= want then
    return {-1, 1, found}
  end
end

-- Tokens reach 2^63 - 1, beyond a Lua number's exact range: compare the decimal strings.
local function older(a, b)
  if #a ~= #b then
    return #a < #b
  end
  return a < b
end

local record = redis.call('hmget', KEYS[2], 'fence', 'owner')
local newest, owner = record[1], record[2]
if newest and not string.find(newest, '^[1-9]%d*$') and newest ~= '0' then
  return {-1, 2, 'hash whose fence is not a token'}  -- another program's: compare nothing
end
if newest then
  if older(ARGV[1], newest) then
    return {0, newest, 'older'}
  end
  if ARGV[1] == newest and owner ~= ARGV[2] then
    return {0, newest, 'owner'}
  end
end

local result = 1
if ARGV[3] == 'claim' then
  -- nothing to write: recording the token below is the whole point
elseif ARGV[3] == 'set' then
  if ARGV[5] ~= '' then
    redis.call('set', KEYS[1], ARGV[4], 'PX', ARGV[5])
  else
    redis.call('set', KEYS[1], ARGV[4])
  end
elseif ARGV[3] == 'hset' then
  -- in slices: unpack() of thousands of values overflows Lua's C stack
  result = 0
  for first = 4, #ARGV, 1000 do
    result = result + redis.call('hset', KEYS[1], unpack(ARGV, first, math.min(first + 999, #ARGV)))
  end
elseif ARGV[3] == 'incrby' then
  result = redis.pcall('incrby', KEYS[1], ARGV[4])
  if type(result) == 'table' then
    if string.find(result.err, 'not an integer', 1, true) then
      return {-1, 1, 'string that is not an integer'}
    end
    if string.find(result.err, 'overflow', 1, true) then
      return {-3, 'overflow'}
    end
    return result
  end
  if math.abs(result) >= 9007199254740992 then
    result = redis.call('get', KEYS[1])  -- past 2^53 a Lua number rounds: the exact digits
  end
else
  return redis.error_reply('unknown fenced operation ' .. ARGV[3])
end
redis.call('hset', KEYS[2], 'fence', ARGV[1], 'owner', ARGV[2])
return {1, result}
