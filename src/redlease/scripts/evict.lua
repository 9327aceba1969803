-- Force a lock free, whoever holds it (`redlease release NAME --force`).
-- KEYS[1] lease, KEYS[2] writer, KEYS[3] shared holders: each is deleted only when it has
-- the type redlease gives it; KEYS[4] the waiter queue, left in place
-- ARGV[1] wake-up channel prefix of the name's slot (a client listens on prefix .. its id)
-- The fence counter is never touched: tokens must keep growing after an eviction.
-- When something was held, waiters are sent "try again" (an empty fence, as a release that
-- cannot hand over sends), so they find the lock free within round trips, not when the
-- evicted lease would have ended: a lock's first live waiter alone, as a release hands
-- it to the first (one whose client no longer listens is passed over, as there), and the
-- first 64 waiters of a read-write lock or semaphore, whose queue order then lets in
-- readers up to a waiting writer. Which channel a client listens on (sharded or not) is
-- its own choice, so both are published to.
-- Returns {lease token, writer token, {holder tokens}}; a key of a foreign type reads false.
local function take(key, kind)
  if redis.call('type', key).ok ~= kind then
    return false
  end
  local value
  if kind == 'zset' then
    value = redis.call('zrange', key, 0, -1)
  else
    value = redis.call('get', key)
  end
  redis.call('del', key)
  return value
end

local lease, writer, shared = take(KEYS[1], 'string'), take(KEYS[2], 'string'), take(KEYS[3], 'zset')
if lease or writer or shared then
  local waiting = redis.pcall('lrange', KEYS[4], 0, 63)
  if type(waiting) == 'table' and not waiting.err then
    local now = ':' .. server_ms() .. ':'
    for _, entry in ipairs(waiting) do
      local reader_or_writer = string.find(entry, '^[rw]:') ~= nil
      local _, client, token = entry_parts(reader_or_writer and string.sub(entry, 3) or entry)
      if client then
        local heard = 0
        for _, publish in ipairs({'spublish', 'publish'}) do
          local listeners = redis.pcall(publish, ARGV[1] .. client, now .. token)
          if type(listeners) == 'number' then
            heard = heard + listeners
          end
        end
        if heard > 0 and not reader_or_writer then
          break
        end
      end
    end
  end
end
return {lease, writer, shared or {}}
