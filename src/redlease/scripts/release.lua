-- Release a lease if it is still ours and hand it straight to the first live waiter;
-- leave a short latch so a release retried after a lost reply gets the same answer.
-- KEYS[1] lease key, KEYS[2] release latch of this token, KEYS[3] waiter queue,
-- KEYS[4] fence counter
-- ARGV[1] owner token, ARGV[2] latch ttl in ms ('0': a give-back, no latch),
-- ARGV[3] 'publish' or 'spublish',
-- ARGV[4] wake-up channel prefix (a waiter listens on prefix .. its token),
-- ARGV[5] a queue member to withdraw first ('' for none: a waiter giving up passes its own)
-- A waiter is live when its channel has a subscriber: a crashed process's connection is
-- gone and a waiter that gave up has unsubscribed, so neither can stall the hand-off.
-- A fence drawn for a waiter that turned out dead is skipped: tokens grow, with gaps.
-- The hand-off message is '<fence>:<server ms>' (see acquire.lua). A waiter's entry is
-- only popped once its fence is drawn and its message sent: when either fails (a foreign
-- value at the counter or the queue, no permission to publish) the lease is still freed,
-- the queue stays as it was, and the waiters find the free lock on their next try (the
-- first one is woken for it when it can be: an empty message means "try again").
-- Returns 1 released | 2 handed to a waiter | -1 the lease had expired
--         | -2 another owner holds the lock now
local lease, latch, queue, fence_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local function remember(code)
  if ARGV[2] ~= '0' then
    redis.call('set', latch, code, 'PX', ARGV[2])
  end
  return code
end
if ARGV[5] ~= '' then
  redis.pcall('lrem', queue, 1, ARGV[5])
end
local owner = redis.pcall('get', lease)
if owner == ARGV[1] then
  for _ = 1, 64 do
    local head = redis.pcall('lindex', queue, 0)
    if type(head) ~= 'string' then
      break
    end
    local sep = string.find(head, ':', 1, true)
    local ttl, token = string.sub(head, 1, sep - 1), string.sub(head, sep + 1)
    local fence = draw_fence(fence_key)
    if not fence then
      redis.pcall(ARGV[3], ARGV[4] .. token, '')  -- no hand-off: wake it to try (and learn why)
      break
    end
    local sent = redis.pcall(ARGV[3], ARGV[4] .. token, fence .. ':' .. server_ms())
    if type(sent) ~= 'number' then
      break
    end
    redis.call('lpop', queue)
    if sent > 0 then
      redis.call('set', lease, token, 'PX', ttl)
      return remember(2)
    end
  end
  redis.call('del', lease)
  return remember(1)
end
local done = redis.pcall('get', latch)
if type(done) == 'string' then
  return tonumber(done)
end
if owner then
  return -2
end
return -1
