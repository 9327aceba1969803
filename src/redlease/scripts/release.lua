-- Release a lease if it is still ours and hand it straight to the first live waiter.
-- KEYS[1] lease key ('<fence>:<owner token>'), KEYS[2] waiter queue, KEYS[3] fence counter
-- of the lock's slot, KEYS[4] the release latch of this token
-- ARGV[1] owner token, ARGV[2] how long the latch remembers the answer (ms; '0' for a
-- give-back, which the caller never sends twice),
-- ARGV[3] 'publish' or 'spublish', ARGV[4] wake-up channel prefix (a client listens on
-- prefix .. its id), ARGV[5] a queue member to withdraw first ('' for none: a waiter
-- giving up passes its own)
-- A waiter is live when its client's channel has a subscriber: a crashed process's
-- connection is gone, so it cannot stall the hand-off; a waiter that gave up has left
-- the queue (and its client gives back a hand-off that reached it too late).
-- A fence drawn for a waiter that turned out dead is skipped: tokens grow, with gaps.
-- The hand-off message is '<fence>:<server ms>:<token>' (see acquire.lua). A waiter's entry is
-- only popped once its fence is drawn and its message sent: when either fails (a foreign
-- value at the counter or the queue, no permission to publish) the lease is still freed,
-- the queue stays as it was, and the waiters find the free lock on their next try (the
-- first one is woken for it when it can be: an empty message means "try again").
-- A release sent again after a lost reply gets the first answer from the latch, which
-- lives ARGV[2] ms (longer than any retry takes) and never outlives that window.
-- Returns 1 released | 2 handed to a waiter | -1 the lease had expired
--         | -2 another owner holds the lock now
local lease, queue, fence_key, latch = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
if ARGV[5] ~= '' then
  redis.pcall('lrem', queue, 1, ARGV[5])
end
local value = redis.pcall('get', lease)
if type(value) == 'string' and token_of(value) == ARGV[1] then
  for _ = 1, 64 do
    local head = redis.pcall('lindex', queue, 0)
    if type(head) ~= 'string' then
      break
    end
    local ttl, client, token = entry_parts(head)
    if not ttl then
      break  -- another program's entry: nobody to hand to; it stays as found
    end
    local fence = draw_fence(fence_key)
    if not fence then
      -- no hand-off: wake it to try (and learn why)
      redis.pcall(ARGV[3], ARGV[4] .. client, ':' .. server_ms() .. ':' .. token)
      break
    end
    local sent = redis.pcall(ARGV[3], ARGV[4] .. client, fence .. ':' .. server_ms() .. ':' .. token)
    if type(sent) ~= 'number' then
      break
    end
    redis.call('lpop', queue)
    if sent > 0 then
      redis.call('set', lease, fence .. ':' .. token, 'PX', ttl)
      if ARGV[2] ~= '0' then
        redis.call('set', latch, '2', 'PX', ARGV[2])
      end
      return 2
    end
  end
  redis.call('del', lease)
  if ARGV[2] ~= '0' then
    redis.call('set', latch, '1', 'PX', ARGV[2])
  end
  return 1
end
local done = redis.pcall('get', latch)
if type(done) == 'string' then
  return tonumber(done)
end
if value then
  return -2
end
return -1
