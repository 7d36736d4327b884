-- Take the lock if it is free or already ours; otherwise report the holder's remaining lease.
--
-- KEYS[1]  lock hash (field = owner id, value = hold count)
-- KEYS[2]  fencing counter
-- ARGV[1]  owner id
-- ARGV[2]  lease in milliseconds
-- ARGV[3]  fencing counter retention in milliseconds
--
-- Returns {1, token} when taken (retaking our own hold is idempotent, so a retried acquire
-- after a timeout is safe), {0, pttl} when another owner holds it (pttl is -1 when a
-- foreign key has no TTL), {-1, type} when a key holds data that is not ours (nothing written).
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind ~= 'none' and kind ~= 'hash' then
  return {-1, kind}
end
if kind == 'hash' and redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then
  return {0, redis.call('PTTL', KEYS[1])}
end

-- The counter starts at the server clock in microseconds when it is missing (first use,
-- retention passed, or a restart without persistence), so tokens keep increasing across
-- its expiry as long as the server clock does not go backwards.
local fence = redis.call('TYPE', KEYS[2])['ok']
if fence == 'none' then
  local now = redis.call('TIME')
  redis.call('SET', KEYS[2], now[1] .. string.rep('0', 6 - #now[2]) .. now[2])
elseif fence ~= 'string' then
  return {-1, fence}
end
local token = redis.pcall('INCR', KEYS[2])
if type(token) ~= 'number' then
  return {-1, 'non-integer string'}
end
redis.call('PEXPIRE', KEYS[2], ARGV[3])

redis.call('HSET', KEYS[1], ARGV[1], 1)
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return {1, token}
