-- Release a lease if it is still ours and hand it straight to the first live waiter;
-- leave a short latch so a release retried after a lost reply gets the same answer.
-- KEYS[1] lease key, KEYS[2] release latch of this token, KEYS[3] waiter queue,
-- KEYS[4] fence counter
-- ARGV[1] owner token, ARGV[2] latch ttl in ms, ARGV[3] 'publish' or 'spublish',
-- ARGV[4] wake-up channel prefix (a waiter listens on prefix .. its token),
-- ARGV[5] a queue member to withdraw first ('' for none: a waiter giving up passes its own)
-- A waiter is live when its channel has a subscriber: a crashed process's connection is
-- gone and a waiter that gave up has unsubscribed, so neither can stall the hand-off.
-- A fence drawn for a waiter that turned out dead is skipped: tokens grow, with gaps.
-- The hand-off message is '<fence>:<server ms>' (see acquire.lua).
-- Returns 1 released | 2 handed to a waiter | -1 the lease had expired
--         | -2 another owner holds the lock now
if ARGV[5] ~= '' then
  redis.call('lrem', KEYS[3], 1, ARGV[5])
end
local owner = redis.pcall('get', KEYS[1])
if owner == ARGV[1] then
  for _ = 1, 64 do
    local head = redis.call('lpop', KEYS[3])
    if not head then
      break
    end
    local sep = string.find(head, ':', 1, true)
    local ttl, token = string.sub(head, 1, sep - 1), string.sub(head, sep + 1)
    local fence = redis.call('incr', KEYS[4])
    local now = redis.call('time')
    local payload = fence .. ':' .. (now[1] * 1000 + math.floor(now[2] / 1000))
    if redis.call(ARGV[3], ARGV[4] .. token, payload) > 0 then
      redis.call('set', KEYS[1], token, 'PX', ttl)
      redis.call('set', KEYS[2], '2', 'PX', ARGV[2])
      return 2
    end
  end
  redis.call('del', KEYS[1])
  redis.call('set', KEYS[2], '1', 'PX', ARGV[2])
  return 1
end
local done = redis.call('get', KEYS[2])
if done then
  return tonumber(done)
end
if owner then
  return -2
end
return -1
