-- Grant an exclusive lease: set owner, fence and TTL together.
-- KEYS[1] lease key (string '<fence>:<owner token>', always with a PX expiry)
-- KEYS[2] fence counter of the lock's cluster slot (integer, never expires, so tokens
--         never go back; the names of one slot share it)
-- KEYS[3] waiter queue (list of '<ttl_ms>:<client>:<token>' in arrival order)
-- ARGV[1] owner token, ARGV[2] ttl in ms,
-- ARGV[3] '1' fair: a free lock goes to the first live waiter, never to a newcomer,
-- ARGV[4] 'publish' or 'spublish', ARGV[5] wake-up channel prefix (a client listens on
--         prefix .. its id, for all its waiters on the locks of this slot),
-- ARGV[6] '0' not queued, '1' join the waiter queue if the lock is held (the caller is
--         already subscribed to its own channel, so a hand-off cannot be missed),
--         '2' queued before: put the entry back if a restart or a failed hand-off
--         dropped it
-- ARGV[7] the caller's client id (where a hand-off to it is published)
-- The lease is read first: a free lock costs a read, an increment and a SET; a refusal
-- draws no fence.
-- A hand-off message carries '<fence>:<server ms>:<token>', and a refusal the server's time too,
-- so a waiter can date its lease by the server's clock even if it was paused meanwhile.
-- Fences travel as decimal strings (see lib.lua).
-- Returns {1, fence} granted
--         {0, ms to wait at most, server ms} held by another: the wait ends when the
--             holder's lease can end, or sooner when a waiter ahead has a shorter lease
--             (handed the lock, it could stop and let it expire that much later)
--         {-1, type, key index} a foreign value at KEYS[index]: another type, or a string
--             without expiry at the lease key (ours never lack one)
--         {-2, message} the fence counter cannot be incremented
local lease, fence_key, queue = KEYS[1], KEYS[2], KEYS[3]
local token, ttl, publish, wake, mode = ARGV[1], ARGV[2], ARGV[4], ARGV[5], ARGV[6]
local member = ttl .. ':' .. ARGV[7] .. ':' .. token

if ARGV[3] == '1' and redis.call('exists', lease) == 0 then
  -- a free fair lock goes to the first live waiter; the queue is only popped once the
  -- hand-off is drawn and sent, so an error leaves every entry in place
  for _ = 1, 64 do
    local head = redis.pcall('lindex', queue, 0)
    if type(head) ~= 'string' or head == member then
      break
    end
    local head_ttl, head_client, head_token = entry_parts(head)
    if not head_ttl then
      break  -- another program's entry: nobody to hand to; it stays as found
    end
    local fence, err = draw_fence(fence_key)
    if not fence then
      return {-2, err}
    end
    local message = fence .. ':' .. server_ms() .. ':' .. head_token
    local sent = redis.pcall(publish, wake .. head_client, message)
    if type(sent) ~= 'number' then
      break
    end
    redis.call('lpop', queue)
    if sent > 0 then
      redis.call('set', lease, fence .. ':' .. head_token, 'PX', head_ttl)
      break
    end
  end
end

local value = redis.pcall('get', lease)
if not value then
  local fence, err = draw_fence(fence_key)
  if not fence then
    return {-2, err}
  end
  redis.call('set', lease, fence .. ':' .. token, 'PX', ttl)
  if mode ~= '0' then
    redis.pcall('lrem', queue, 1, member)
  end
  return {1, fence}
end
if type(value) == 'table' then
  return {-1, redis.call('type', lease).ok, 1}
end
if token_of(value) == token then
  -- already ours: the token is new per acquisition, so this is a lost reply being retried
  -- or a hand-off whose message was lost (a reconnect). The lease is written again (its
  -- TTL restarted, no later than the caller's deadline assumes): a WAIT after this call
  -- counts only this connection's writes, and a retry sent on a new connection must not
  -- see the replicas confirm a grant none of them has.
  redis.call('pexpire', lease, ttl)
  if mode ~= '0' then
    redis.pcall('lrem', queue, 1, member)
  end
  return {1, fence_of(value) or '0'}
end
local pttl = redis.call('pttl', lease)
if pttl < 0 then
  return {-1, 'string', 1}
end
local wait = pttl
if mode ~= '0' then
  local ahead
  if mode == '1' then
    ahead = redis.pcall('lrange', queue, 0, -1)
    if type(ahead) == 'table' and not ahead.err then
      redis.call('rpush', queue, member)
    else
      ahead = nil
    end
  else
    ahead = ensure_queued(queue, member)
  end
  if not ahead then
    return {-1, redis.call('type', queue).ok, 3}
  end
  local shortest = shortest_lease(ahead, false)
  if shortest and shortest < wait then
    wait = shortest
  end
  redis.call('pexpire', queue, pttl + 60000)
end
return {0, wait, server_ms()}
