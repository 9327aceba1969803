-- Extend every listed lease that is still ours; never recreate one that is gone.
-- KEYS[i] the key holding lease i; ARGV[3i-2] its kind: 'x' an exclusive lease whose
-- value is '<fence>:<token>', 's' a string whose value is the token (writers), 'z' a
-- member of a sorted set scored by expiry in ms (readers, permits); ARGV[3i-1] owner
-- token; ARGV[3i] new ttl in ms.
-- Returns a list with 1 (extended) or 0 (gone, expired or owned by another) per key.
local out = {}
local now = nil
for i, key in ipairs(KEYS) do
  local kind, token, ttl = ARGV[3 * i - 2], ARGV[3 * i - 1], ARGV[3 * i]
  out[i] = 0
  if kind == 's' or kind == 'x' then
    local value = redis.pcall('get', key)
    if type(value) == 'string' and kind == 'x' then
      value = token_of(value)
    end
    if value == token then
      redis.call('pexpire', key, ttl)
      out[i] = 1
    end
  else
    if not now then
      local t = redis.call('time')
      now = t[1] * 1000 + math.floor(t[2] / 1000)
    end
    local expiry = tonumber(redis.call('zscore', key, token))
    if expiry and expiry > now then
      redis.call('zadd', key, 'XX', now + ttl, token)
      redis.call('pexpire', key, math.max(redis.call('pttl', key), ttl))
      out[i] = 1
    end
  end
end
return out
