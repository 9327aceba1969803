-- Take several exclusive locks in one atomic step, all or none.
-- KEYS[2i-1] lease key of lock i, KEYS[2i] its fence counter (all in one slot, or a
-- server that is not a cluster)
-- ARGV[1] owner token (one for all the locks), ARGV[2] ttl in ms. A lock that already
-- holds this token (handed over while the caller waited for it) is kept, lease refreshed.
-- Every fence is drawn before anything is written, so a failing counter takes nothing.
-- Returns {1, fence_1, ..., fence_n} all granted (decimal strings; a kept lock reports
--            its current token) |
--         {0, i, pttl} lock i is held by another: nothing was taken |
--         {-1, i, type} lock i's key is foreign | {-2, i, message} lock i's counter fails
local n = #KEYS / 2
for i = 1, n do
  local owner = redis.pcall('get', KEYS[2 * i - 1])
  if owner and owner ~= ARGV[1] then
    local pttl = redis.call('pttl', KEYS[2 * i - 1])
    if type(owner) == 'table' or pttl < 0 then
      return {-1, i, redis.call('type', KEYS[2 * i - 1]).ok}
    end
    return {0, i, pttl}
  end
end
local fences = {1}
for i = 1, n do
  local fence, err
  if redis.pcall('get', KEYS[2 * i - 1]) == ARGV[1] then
    fence = current_fence(KEYS[2 * i])
    err = 'the fencing counter vanished while the lock was held'
  else
    fence, err = draw_fence(KEYS[2 * i])
  end
  if not fence then
    return {-2, i, err}
  end
  fences[i + 1] = fence
end
for i = 1, n do
  redis.call('set', KEYS[2 * i - 1], ARGV[1], 'PX', ARGV[2])
end
return fences
