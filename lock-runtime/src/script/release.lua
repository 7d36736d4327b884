-- Release our hold and wake a waiter.
--
-- KEYS[1]  lock hash
-- KEYS[2]  unlock channel
-- ARGV[1]  owner id
--
-- Returns {1, 0} when released (the key is deleted and the unlock message published once no
-- owner is left), {0, 0} when this owner does not hold the lock, {-1, type} for foreign data.
local removed = redis.pcall('HDEL', KEYS[1], ARGV[1])
if type(removed) == 'table' then
  if not string.find(removed.err, 'WRONGTYPE', 1, true) then
    -- READONLY (a demoted master), OOM, …: not foreign data; let the client see it.
    return redis.error_reply(removed.err)
  end
  return {-1, redis.call('TYPE', KEYS[1])['ok']}
end
if removed == 0 then
  return {0, 0}
end
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('PUBLISH', KEYS[2], '0')
end
return {1, 0}
