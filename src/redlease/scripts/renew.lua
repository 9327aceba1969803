-- Extend every listed lease that is still ours; never recreate one that is gone.
-- KEYS[i] lease key; ARGV[2i-1] owner token, ARGV[2i] new ttl in ms
-- Returns a list with 1 (extended) or 0 (gone or owned by another) per key.
local out = {}
for i, key in ipairs(KEYS) do
  if redis.pcall('get', key) == ARGV[2 * i - 1] then
    redis.call('pexpire', key, ARGV[2 * i])
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
