-- Leases that several holders can have at once: read-write locks and semaphores.
-- KEYS[1] holders: sorted set of shared holders' tokens (readers, permits) scored by
--         expiry in ms, so a crashed holder's lease ends by itself
-- KEYS[2] writer: string holding the exclusive holder's token, with a PX expiry
-- KEYS[3] waiter queue: list of '<mode>:<ttl_ms>:<token>' in arrival order
-- KEYS[4] fence counter; KEYS[5] release latch of ARGV[3]
-- ARGV[1] op: 'acquire' | 'release' | 'downgrade' | 'available' | 'count'
-- ARGV[2] mode: 'r' shared (reader, permit) | 'w' exclusive (writer)
-- ARGV[3] token, ARGV[4] ttl in ms,
-- ARGV[5] capacity: most shared holders at once (0 = no limit, as for readers)
-- ARGV[6] 'publish' or 'spublish', ARGV[7] wake-up channel prefix
-- ARGV[8] acquire: '0' not queued | '1' join the queue if blocked | '2' already queued;
--         release: a queue member to withdraw first ('' for none)
-- ARGV[9] release latch ttl in ms
-- The queue is served strictly in order and a newcomer never passes a waiting one, so a
-- writer waiting behind readers keeps new readers out: writers cannot starve.
-- acquire returns {1, fence} | {0, ms until a blocker may end, server ms}; hand-off
-- messages carry '<fence>:<server ms>' (see acquire.lua); release returns 1 released
-- | 2 released and handed on | -1 the lease had already ended; downgrade returns 1 | -1;
-- available returns the free shared places (capacity - holders), or -1 without capacity;
-- count returns how many shared holders there are.
local holders, writer, queue, fence_key, latch = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local op, mode, token, ttl = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
local capacity = tonumber(ARGV[5])
local t = redis.call('time')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
redis.call('zremrangebyscore', holders, '-inf', now)

local function can_enter(want)
  if redis.call('exists', writer) == 1 then
    return false
  end
  local count = redis.call('zcard', holders)
  if want == 'w' then
    return count == 0
  end
  return capacity == 0 or count < capacity
end

local function grant(want, who, lease_ms)
  if want == 'w' then
    redis.call('set', writer, who, 'PX', lease_ms)
  else
    redis.call('zadd', holders, now + lease_ms, who)
    redis.call('pexpire', holders, math.max(redis.call('pttl', holders), lease_ms))
  end
end

-- Hand the lease to waiters at the head of the queue for as long as they fit; a waiter
-- whose channel has no subscriber (crashed, or gave up) is dropped. Returns the fence
-- when the caller itself ('me', a queue member) was at the head and got in.
local function dispatch(me)
  for _ = 1, 64 do
    local head = redis.call('lindex', queue, 0)
    if not head then
      return nil
    end
    local want = string.sub(head, 1, 1)
    local rest = string.sub(head, 3)
    local sep = string.find(rest, ':', 1, true)
    local lease_ms, who = tonumber(string.sub(rest, 1, sep - 1)), string.sub(rest, sep + 1)
    local numsub = ARGV[6] == 'spublish' and 'shardnumsub' or 'numsub'
    if head ~= me and redis.call('pubsub', numsub, ARGV[7] .. who)[2] == 0 then
      redis.call('lpop', queue)  -- a waiter nobody listens for any more: skip it now
    else
      if not can_enter(want) then
        return nil
      end
      redis.call('lpop', queue)
      local fence = redis.call('incr', fence_key)
      if head == me then
        grant(want, who, lease_ms)
        return fence
      end
      if redis.call(ARGV[6], ARGV[7] .. who, fence .. ':' .. now) > 0 then
        grant(want, who, lease_ms)
      end
    end
  end
  return nil
end

local function blocked_ms()
  local wait = redis.call('pttl', writer)
  local first = redis.call('zrange', holders, 0, 0, 'WITHSCORES')
  if first[2] then
    local ends = tonumber(first[2]) - now
    if wait < 0 or ends < wait then
      wait = ends
    end
  end
  return math.max(wait, 1)
end

if op == 'acquire' then
  local member = mode .. ':' .. ARGV[4] .. ':' .. token
  local fence = dispatch(member)
  if fence then
    return {1, fence}
  end
  if redis.call('llen', queue) == 0 and can_enter(mode) then
    grant(mode, token, ttl)
    return {1, redis.call('incr', fence_key)}
  end
  local wait = blocked_ms()
  if ARGV[8] == '1' then
    redis.call('rpush', queue, member)
  end
  if ARGV[8] ~= '0' then
    redis.call('pexpire', queue, wait + 60000)
  end
  return {0, wait, now}
end

if op == 'count' then
  return redis.call('zcard', holders)
end

if op == 'available' then
  if capacity == 0 then
    return -1
  end
  return capacity - redis.call('zcard', holders)
end

if op == 'downgrade' then
  if redis.pcall('get', writer) ~= token then
    return -1
  end
  redis.call('del', writer)
  grant('r', token, ttl)
  dispatch(nil)
  return 1
end

-- release
if ARGV[8] ~= '' then
  redis.call('lrem', queue, 1, ARGV[8])
  dispatch(nil)
end
local done = redis.call('get', latch)
if done then
  return tonumber(done)
end
local released = false
if mode == 'w' then
  if redis.pcall('get', writer) == token then
    redis.call('del', writer)
    released = true
  end
else
  released = redis.call('zrem', holders, token) == 1
end
if not released then
  return -1
end
local code = 1
if redis.call('llen', queue) > 0 then
  local before = redis.call('get', fence_key)
  dispatch(nil)
  if redis.call('get', fence_key) ~= before then
    code = 2
  end
end
redis.call('set', latch, code, 'PX', ARGV[9])
return code
