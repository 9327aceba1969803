-- Take one unit of a flash-sale stock in one atomic step: decrement only while stock > 0.
-- The check and the decrement run inside the server, so no other command runs in between
-- and the stock can never go below zero, however many buyers call this at once.
--
-- KEYS[1]: the stock counter (an integer string; a missing key counts as 0)
-- Returns the stock left after this purchase (0 or more), or -1 when sold out.
local stock = tonumber(redis.call('GET', KEYS[1]) or '0')
if stock == nil or stock <= 0 then
  return -1
end
return redis.call('DECR', KEYS[1])
