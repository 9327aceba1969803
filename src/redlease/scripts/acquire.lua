-- Grant an exclusive lease: set owner and TTL together, and draw the next fencing token.
-- KEYS[1] lease key (string: owner token, always with a PX expiry)
-- KEYS[2] fence counter (integer, never expires, so tokens never go back)
-- KEYS[3] waiter queue (list of '<ttl_ms>:<token>' in arrival order)
-- ARGV[1] owner token, ARGV[2] ttl in ms,
-- ARGV[3] '1' fair: a free lock goes to the first live waiter, never to a newcomer,
-- ARGV[4] 'publish' or 'spublish', ARGV[5] wake-up channel prefix (a waiter listens on
--         prefix .. its token),
-- ARGV[6] '0' not queued, '1' queued: be in the waiter queue while the lock is held (the
--         caller is already subscribed to its own channel, so a hand-off cannot be
--         missed); an entry a restart or a failed hand-off dropped is put back
-- A hand-off message carries '<fence>:<server ms>', and a refusal the server's time too,
-- so a waiter can date its lease by the server's clock even if it was paused meanwhile.
-- Fences travel as decimal strings (see lib.lua).
-- Returns {1, fence} granted
--         {0, ms to wait at most, server ms} held by another: the wait ends when the
--             holder's lease can end, or sooner when a waiter ahead has a shorter lease
--             (handed the lock, it could stop and let it expire that much later)
--         {-1, type, key index} a foreign value at KEYS[index]: another type, or a string
--             without expiry at the lease key (ours never lack one)
--         {-2, message} the fence counter cannot be incremented, or vanished
local lease, fence_key, queue = KEYS[1], KEYS[2], KEYS[3]
local token, ttl, publish, wake, queued = ARGV[1], ARGV[2], ARGV[4], ARGV[5], ARGV[6] ~= '0'
local member = ttl .. ':' .. token

if ARGV[3] == '1' and redis.call('exists', lease) == 0 then
  -- a free fair lock goes to the first live waiter; the queue is only popped once the
  -- hand-off is drawn and sent, so an error leaves every entry in place
  for _ = 1, 64 do
    local head = redis.pcall('lindex', queue, 0)
    if type(head) ~= 'string' or head == member then
      break
    end
    local sep = string.find(head, ':', 1, true)
    local head_ttl, head_token = string.sub(head, 1, sep - 1), string.sub(head, sep + 1)
    local fence, err = draw_fence(fence_key)
    if not fence then
      return {-2, err}
    end
    local sent = redis.pcall(publish, wake .. head_token, fence .. ':' .. server_ms())
    if type(sent) ~= 'number' then
      break
    end
    redis.call('lpop', queue)
    if sent > 0 then
      redis.call('set', lease, head_token, 'PX', head_ttl)
      break
    end
  end
end

if redis.call('set', lease, token, 'NX', 'PX', ttl) then
  local fence, err = draw_fence(fence_key)
  if not fence then
    redis.call('del', lease)
    return {-2, err}
  end
  if queued then
    redis.pcall('lrem', queue, 1, member)
  end
  return {1, fence}
end

local owner = redis.pcall('get', lease)
if type(owner) == 'table' then
  return {-1, redis.call('type', lease).ok, 1}
end
if owner == token then
  -- already ours: the token is new per acquisition, so this is a lost reply being retried
  -- or a hand-off whose message was lost (a reconnect)
  if queued then
    redis.pcall('lrem', queue, 1, member)
  end
  local fence = current_fence(fence_key)
  if not fence then
    return {-2, 'the fencing counter vanished while the lock was held'}
  end
  return {1, fence}
end
local pttl = redis.call('pttl', lease)
if pttl < 0 then
  return {-1, 'string', 1}
end
local wait = pttl
if queued then
  local ahead = ensure_queued(queue, member)
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
