-- What the server holds for one lock name, read at one instant (redlease ls, show, top).
-- KEYS: lease, fence, queue, holders, writer, count. ARGV[1]: how many waiters to list.
-- Returns {server ms, lease token, lease pttl, fence, queue length, first waiters,
--          {token, expiry ms, ...} of live shared holders, writer token, writer pttl,
--          latch count, latch pttl}; a key of a foreign type reads as absent.
local t = redis.call('time')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local function text(key)
  local value = redis.pcall('get', key)
  if type(value) == 'string' then return value end
  return false
end
local function listed(reply)
  if type(reply) == 'table' and not reply.err then return reply end
  return {}
end
local queue_length = redis.pcall('llen', KEYS[3])
if type(queue_length) ~= 'number' then queue_length = 0 end
return {
  now,
  text(KEYS[1]), redis.call('pttl', KEYS[1]),
  text(KEYS[2]),
  queue_length, listed(redis.pcall('lrange', KEYS[3], 0, tonumber(ARGV[1]) - 1)),
  listed(redis.pcall('zrangebyscore', KEYS[4], '(' .. now, '+inf', 'WITHSCORES')),
  text(KEYS[5]), redis.call('pttl', KEYS[5]),
  text(KEYS[6]), redis.call('pttl', KEYS[6]),
}
