-- Leases that several holders can have at once: read-write locks and semaphores.
-- KEYS[1] holders: sorted set of shared holders' tokens (readers, permits) scored by
--         expiry in ms, so a crashed holder's lease ends by itself
-- KEYS[2] writer: string holding the exclusive holder's token, with a PX expiry
-- KEYS[3] waiter queue: list of '<mode>:<ttl_ms>:<client>:<token>' in arrival order
-- KEYS[4] fence counter; KEYS[5] release latch of ARGV[3]
-- ARGV[1] op: 'acquire' | 'release' | 'downgrade' | 'available' | 'count'
-- ARGV[2] mode: 'r' shared (reader, permit) | 'w' exclusive (writer)
-- ARGV[3] token, ARGV[4] ttl in ms,
-- ARGV[5] capacity: most shared holders at once (0 = no limit, as for readers)
-- ARGV[6] 'publish' or 'spublish', ARGV[7] wake-up channel prefix (a client listens on
--         prefix .. its id)
-- ARGV[8] acquire: '0' not queued | '1' queued (an entry that was dropped is put back);
--         release: a queue member to withdraw first ('' for none)
-- ARGV[9] release latch ttl in ms ('0': a give-back, no latch), ARGV[10] client id
-- The queue is served strictly in order and a newcomer never passes a waiting one, so a
-- writer waiting behind readers keeps new readers out: writers cannot starve. A waiter's
-- entry is only popped once its fence is drawn and its message sent (see release.lua).
-- acquire returns {1, fence} | {0, ms to wait at most, server ms} (see acquire.lua)
-- | {-1, type, key index} a foreign value | {-2, message} the fence counter fails;
-- hand-off messages carry '<fence>:<server ms>:<token>'; fences are decimal strings (lib.lua).
-- release returns 1 released | 2 released and handed on | -1 the lease had already ended;
-- downgrade returns 1 | -1; available returns the free shared places (capacity - holders),
-- or -1 without capacity; count returns how many shared holders there are.
local holders, writer, queue, fence_key, latch = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local op, mode, token, ttl = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
local capacity = tonumber(ARGV[5])
local now = server_ms()

local holders_type = redis.call('type', holders).ok
if holders_type ~= 'none' and holders_type ~= 'zset' then
  return {-1, holders_type, 1}
end
local writer_type = redis.call('type', writer).ok
if writer_type ~= 'none' and (writer_type ~= 'string' or redis.call('pttl', writer) < 0) then
  return {-1, writer_type, 2}  -- ours always has an expiry
end
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
-- when the caller itself ('me', a queue member) was at the head and got in, or nil and
-- the error when no fence could be drawn, or nil, nil, true when the head is not an entry
-- of ours.
local function dispatch(me)
  local numsub = ARGV[6] == 'spublish' and 'shardnumsub' or 'numsub'
  for _ = 1, 64 do
    local head = redis.pcall('lindex', queue, 0)
    if type(head) ~= 'string' then
      return nil
    end
    local want = string.sub(head, 1, 1)
    local ttl, client, who = entry_parts(string.sub(head, 3))
    local lease_ms = tonumber(ttl)
    if not lease_ms or (want ~= 'r' and want ~= 'w') then
      return nil, nil, true  -- another program's entry: nobody to hand to; left as found
    end
    local listeners = head == me and {0, 1} or redis.pcall('pubsub', numsub, ARGV[7] .. client)
    if type(listeners[2]) == 'number' and listeners[2] == 0 then
      redis.call('lpop', queue)  -- a waiter nobody listens for any more: skip it now
    else
      if not can_enter(want) then
        return nil
      end
      local fence, err = draw_fence(fence_key)
      if not fence then
        if head ~= me then  -- no hand-off: wake it to try again
          redis.pcall(ARGV[6], ARGV[7] .. client, ':' .. string.format('%d', now) .. ':' .. who)
        end
        return nil, err
      end
      if head == me then
        redis.call('lpop', queue)
        grant(want, who, lease_ms)
        return fence
      end
      local message = fence .. ':' .. string.format('%d', now) .. ':' .. who
      local sent = redis.pcall(ARGV[6], ARGV[7] .. client, message)
      if type(sent) ~= 'number' then
        return nil
      end
      redis.call('lpop', queue)
      if sent > 0 then
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

local function granted_before()
  if mode == 'w' then
    return redis.pcall('get', writer) == token
  end
  return redis.call('zscore', holders, token) ~= false
end

if op == 'acquire' then
  local member = mode .. ':' .. ARGV[4] .. ':' .. ARGV[10] .. ':' .. token
  if granted_before() then
    -- already ours: the token is new per acquisition, so this is a lost reply being
    -- retried or a hand-off whose message was lost. No fence is kept for a shared grant,
    -- so a new one is drawn (the old one never reached the caller); the lease is written
    -- again so that a WAIT after this call covers it (see acquire.lua).
    local fence, err = draw_fence(fence_key)
    if not fence then
      return {-2, err}
    end
    grant(mode, token, ttl)
    redis.pcall('lrem', queue, 1, member)
    return {1, fence}
  end
  local fence, err, foreign = dispatch(member)
  if foreign then
    return {-1, 'list holding entries of another program', 3}
  end
  if fence then
    return {1, fence}
  end
  if err then
    return {-2, err}
  end
  local queue_length = redis.pcall('llen', queue)
  if type(queue_length) == 'table' then
    return {-1, redis.call('type', queue).ok, 3}
  end
  if queue_length == 0 and can_enter(mode) then
    fence, err = draw_fence(fence_key)
    if not fence then
      return {-2, err}
    end
    grant(mode, token, ttl)
    return {1, fence}
  end
  local blocked = blocked_ms()
  local wait = blocked
  if ARGV[8] ~= '0' then
    local ahead = ensure_queued(queue, member)
    local shortest = shortest_lease(ahead, true)
    if shortest and shortest < wait then
      wait = shortest
    end
    redis.call('pexpire', queue, blocked + 60000)
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
  redis.pcall('lrem', queue, 1, ARGV[8])
  dispatch(nil)
end
local done = redis.pcall('get', latch)
if type(done) == 'string' then
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
local waiting = redis.pcall('llen', queue)
if type(waiting) == 'number' and waiting > 0 then
  local before = current_fence(fence_key)
  dispatch(nil)
  if current_fence(fence_key) ~= before then
    code = 2
  end
end
if ARGV[9] ~= '0' then
  redis.call('set', latch, code, 'PX', ARGV[9])
end
return code
