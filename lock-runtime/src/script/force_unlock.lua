-- Delete the lock whoever holds it, and wake a waiter.
--
-- KEYS[1]  lock hash
-- KEYS[2]  unlock channel
--
-- Returns {1, 0} when a lock was deleted, {0, 0} when it was free, {-1, type} for foreign data.
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind == 'none' then
  return {0, 0}
end
if kind ~= 'hash' then
  return {-1, kind}
end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', KEYS[2], '0')
return {1, 0}
