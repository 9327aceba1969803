-- Grant an exclusive lease: set owner and TTL together, and draw the next fencing token.
-- KEYS[1] lease key (string: owner token, always with a PX expiry)
-- KEYS[2] fence counter (integer, never expires, so tokens never go back)
-- KEYS[3] waiter queue (list of '<ttl_ms>:<token>' in arrival order)
-- ARGV[1] owner token, ARGV[2] ttl in ms,
-- ARGV[3] '1' fair: a free lock goes to the first live waiter, never to a newcomer,
-- ARGV[4] 'publish' or 'spublish', ARGV[5] wake-up channel prefix (a waiter listens on
--         prefix .. its token),
-- ARGV[6] '0' not queued, '1' join the waiter queue if the lock is held (the caller is
--         already subscribed to its own channel, so a hand-off cannot be missed),
--         '2' already queued (keep the queue alive)
-- A hand-off message carries '<fence>:<server ms>', and a refusal the server's time too,
-- so a waiter can date its lease by the server's clock even if it was paused meanwhile.
-- Returns {1, fence} granted | {0, pttl, server ms} held by another
--         {-1, type} a foreign key: another type, or a value without expiry (ours never lack one)
--         {-2, message} the fence counter cannot be incremented
local member = ARGV[2] .. ':' .. ARGV[1]
local function server_ms()
  local t = redis.call('time')
  return t[1] * 1000 + math.floor(t[2] / 1000)
end
if ARGV[3] == '1' and redis.call('exists', KEYS[1]) == 0 then
  for _ = 1, 64 do
    local head = redis.call('lindex', KEYS[3], 0)
    if not head or head == member then
      break
    end
    redis.call('lpop', KEYS[3])
    local sep = string.find(head, ':', 1, true)
    local ttl, token = string.sub(head, 1, sep - 1), string.sub(head, sep + 1)
    local fence = redis.call('incr', KEYS[2])
    if redis.call(ARGV[4], ARGV[5] .. token, fence .. ':' .. server_ms()) > 0 then
      redis.call('set', KEYS[1], token, 'PX', ttl)
      break
    end
  end
end
if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local fence = redis.pcall('incr', KEYS[2])
  if type(fence) == 'table' then
    redis.call('del', KEYS[1])
    return {-2, fence.err}
  end
  if ARGV[6] == '2' then
    redis.call('lrem', KEYS[3], 1, member)
  end
  return {1, fence}
end
if redis.pcall('get', KEYS[1]) == ARGV[1] then
  -- already ours: the token is new per acquisition, so this is a lost reply being retried
  -- or a hand-off whose message was lost (a reconnect)
  if ARGV[6] ~= '0' then
    redis.call('lrem', KEYS[3], 1, member)
  end
  return {1, tonumber(redis.call('get', KEYS[2]))}
end
local pttl = redis.call('pttl', KEYS[1])
if pttl < 0 then
  return {-1, redis.call('type', KEYS[1]).ok}
end
if ARGV[6] == '1' then
  redis.call('rpush', KEYS[3], member)
end
if ARGV[6] ~= '0' then
  redis.call('pexpire', KEYS[3], pttl + 60000)
end
return {0, pttl, server_ms()}
