-- Release a lease if it is still ours, wake the waiters, and leave a short latch so a
-- release retried after a lost reply gets the same answer.
-- KEYS[1] lease key, KEYS[2] release latch of this token, KEYS[3] wake-up channel
-- ARGV[1] owner token, ARGV[2] latch ttl in ms, ARGV[3] 'publish' or 'spublish'
-- Returns 1 released | -1 the lease had expired | -2 another owner holds the lock now
local owner = redis.pcall('get', KEYS[1])
if owner == ARGV[1] then
  redis.call('del', KEYS[1])
  redis.call(ARGV[3], KEYS[3], '1')
  redis.call('set', KEYS[2], '1', 'PX', ARGV[2])
  return 1
end
if redis.call('exists', KEYS[2]) == 1 then
  return 1
end
if owner then
  return -2
end
return -1
