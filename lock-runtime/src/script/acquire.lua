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
    if not string.find(mine.err, 'WRONGTYPE', 1, true) then
      -- Not foreign data: READONLY (a demoted master), OOM, …; let the client see it.
      return redis.error_reply(mine.err)
    end
    return {-1, redis.call('TYPE', KEYS[1])['ok']}
  end
  if mine == 0 then
    return {0, redis.call('PTTL', KEYS[1])}
  end
end

local token = redis.pcall('INCR', KEYS[2])
if type(token) == 'table' then
  if not (string.find(token.err, 'WRONGTYPE', 1, true) or string.find(token.err, 'not an integer', 1, true)) then
    return redis.error_reply(token.err)
  end
  -- Not a counter: a hash, a list, or a string that is not an integer. Nothing was written.
  return {-1, redis.call('TYPE', KEYS[2])['ok']}
end
-- Never below the server clock in microseconds: tokens keep increasing when the counter is lost
-- (first use, retention passed, a restart without persistence) and across a failover to a
-- replica whose counter lagged, as long as the servers' clocks agree to within the time between
-- the two grants. One grant per microsecond is far above any lock's hand-over rate, so the
-- counter does not run ahead of the clock.
local now = redis.call('TIME')
local clock = tonumber(now[1]) * 1000000 + tonumber(now[2])
if token < clock then
  redis.call('SET', KEYS[2], string.format('%d', clock))
  token = clock
end
redis.call('PEXPIRE', KEYS[2], ARGV[3])

redis.call('HSET', KEYS[1], ARGV[1], 1)
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return {1, token}
