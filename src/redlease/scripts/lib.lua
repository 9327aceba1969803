-- Helpers every lock script shares; scripts/__init__.py puts this file before each of them.

-- The server's clock in ms: a waiter dates a hand-off by it (see acquire.lua).
local function server_ms()
  local t = redis.call('time')
  return t[1] * 1000 + math.floor(t[2] / 1000)
end

-- Draw the next fencing token. Tokens go up to 2^63 - 1, past the 2^53 a Lua number holds
-- exactly, so they travel as decimal strings. Returns the token, or nil and what was found
-- instead (another type, a non-integer, a count below zero, or 'overflow' at the maximum)
-- with nothing changed: a token is always positive.
local function draw_fence(key)
  local n = redis.pcall('incr', key)
  if type(n) == 'table' then
    local err = n.err
    if string.find(err, 'WRONGTYPE', 1, true) then
      return nil, redis.call('type', key).ok
    end
    if string.find(err, 'not an integer', 1, true) then
      return nil, 'string that is not an integer'
    end
    if string.find(err, 'overflow', 1, true) then
      return nil, 'overflow'
    end
    -- not the counter's fault (a read-only replica, out of memory): say so as is. Redis
    -- before 7 cannot raise an error table from a script (its error handler garbles it),
    -- so there the message is raised as a string.
    if redis.REDIS_VERSION then
      error(n)
    end
    error(n.err)
  end
  if n < 1 then
    redis.call('decr', key)  -- leave another program's value as it was found
    return nil, string.format('negative or zero fence counter (%d)', n - 1)
  end
  if n < 9007199254740992 then
    return string.format('%d', n)
  end
  return redis.call('get', key)
end

-- The current token of a fence counter, or nil when it holds none.
local function current_fence(key)
  local value = redis.pcall('get', key)
  if type(value) == 'string' then
    return value
  end
  return nil
end

-- The shortest lease among queue entries '[<mode>:]<ttl_ms>:<token>' (nil for none): if
-- any of them is handed the lock and then stops, the lock is free again that much later.
local function shortest_lease(entries, with_mode)
  local shortest = nil
  local pattern = with_mode and '^%a:(%d+):' or '^(%d+):'
  for _, entry in ipairs(entries) do
    local ttl = tonumber(string.match(entry, pattern))
    if ttl and (not shortest or ttl < shortest) then
      shortest = ttl
    end
  end
  return shortest
end

-- Make sure 'member' is in the waiter queue (a restart or a failed hand-off may have
-- dropped it), and return the entries ahead of it; nil when the queue key holds a
-- foreign value.
local function ensure_queued(queue, member)
  local position = redis.pcall('lpos', queue, member)
  if type(position) == 'table' then
    return nil
  end
  if position then
    if position == 0 then
      return {}
    end
    return redis.call('lrange', queue, 0, position - 1)
  end
  local ahead = redis.call('lrange', queue, 0, -1)
  redis.call('rpush', queue, member)
  return ahead
end

-- An exclusive lease's value is '<fence>:<token>': the fence travels with the lease, since
-- the counter (one per cluster slot) moves on with other names. These split it.
local function token_of(value)
  local sep = string.find(value, ':', 1, true)
  if not sep then
    return value
  end
  return string.sub(value, sep + 1)
end

local function fence_of(value)
  return string.match(value, '^(%d+):')
end

-- A waiter's queue entry, '<ttl_ms>:<client>:<token>': the lease it wants, the client that
-- listens for it (on the channel <wake prefix><client>) and its token. A hand-off message
-- on that channel reads '<fence>:<server ms>:<token>'.
local function entry_parts(entry)
  local ttl, client, token = string.match(entry, '^(%d+):([^:]*):(.*)$')
  return ttl, client, token
end
