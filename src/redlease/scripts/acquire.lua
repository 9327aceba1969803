-- Grant a fresh lease: set owner and TTL together, and draw the next fencing token.
-- KEYS[1] lease key (string: owner token, always with a PX expiry)
-- KEYS[2] fence counter (integer, never expires, so tokens never go back)
-- ARGV[1] owner token, ARGV[2] ttl in ms,
-- ARGV[3] "1" to report a foreign key (wrong type or no expiry) instead of waiting on it
-- Returns {1, fence} granted | {0, pttl} held by another | {-1, type} foreign key
--         {-2, message} the fence counter cannot be incremented
if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local fence = redis.pcall('incr', KEYS[2])
  if type(fence) == 'table' then
    redis.call('del', KEYS[1])
    return {-2, fence.err}
  end
  return {1, fence}
end
local pttl = redis.call('pttl', KEYS[1])
if ARGV[3] == '1' then
  local kind = redis.call('type', KEYS[1]).ok
  if kind ~= 'string' or pttl < 0 then
    return {-1, kind}
  end
end
return {0, pttl}
