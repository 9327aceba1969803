-- The demo shop's fenced stock write.
-- KEYS[1] stock, KEYS[2] highest fence accepted; ARGV[1] new stock, ARGV[2] writer's fence.
-- Returns 1 if written, 0 if the writer's fence is older than one already accepted.
local accepted = tonumber(redis.call('GET', KEYS[2]) or '0')
local fence = tonumber(ARGV[2])
if fence < accepted then
  return 0
end
redis.call('SET', KEYS[2], ARGV[2])
redis.call('SET', KEYS[1], ARGV[1])
return 1
