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
if redis.call('EXISTS', KEYS[1]) == 1 then
  local mine = redis.pcall('HEXISTS', KEYS[1], ARGV[1])
  if type(mine) == 'table' then
    return {-1, redis.call('TYPE', KEYS[1])['ok']}
  end
  if mine == 0 then
    return {0, redis.call('PTTL', KEYS[1])}
  end
end

local token = redis.pcall('INCR', KEYS[2])
if type(token) == 'table' then
  -- Not a counter: a hash, a list, or a string that is not an integer. Nothing was written.
  return {-1, redis.call('TYPE', KEYS[2])['ok']}
end
if token == 1 then
  -- The counter was missing (first use, retention passed, or a restart without persistence):
  -- start from the server clock in microseconds, so tokens keep increasing across its loss as
  -- long as the server clock does not go backwards.
  local now = redis.call('TIME')
  local start = now[1] .. string.rep('0', 6 - #now[2]) .. now[2]
  redis.call('SET', KEYS[2], start)
  token = tonumber(start)
end
redis.call('PEXPIRE', KEYS[2], ARGV[3])

redis.call('HSET', KEYS[1], ARGV[1], 1)
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return {1, token}
