-- Helpers every lock script shares; scripts/__init__.py puts this file before each of them.

-- The server's clock in ms: a waiter dates a hand-off by it (see acquire.lua).
local function server_ms()
  local t = redis.call('time')
  return t[1] * 1000 + math.floor(t[2] / 1000)
end

-- Draw the next fencing token. Tokens go up to 2^63 - 1, past the 2^53 a Lua number holds
-- exactly, so they travel as decimal strings. Returns the token, or nil and the server's
-- error (a foreign value, or a counter at its maximum) with nothing changed.
local function draw_fence(key)
  local n = redis.pcall('incr', key)
  if type(n) == 'table' then
    return nil, n.err
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
