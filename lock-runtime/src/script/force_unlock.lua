-- Delete the lock whoever holds it (every reader and permit holder too), and wake every waiter.
--
-- KEYS[1]  lock hash, or the holders of a semaphore or read/write lock
-- KEYS[2]  unlock channel
-- ARGV[1]  (optional) the message; `*` (wake every waiter) by default
--
-- Returns {1, 0} when a lock was deleted, {0, 0} when it was free, {-1, type} for foreign data.
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind == 'none' then
  return {0, 0}
end
if kind ~= 'hash' and kind ~= 'zset' then
  return {-1, kind}
end
redis.call('DEL', KEYS[1])
wake(KEYS[2], ARGV[1] or '*')
return {1, 0}
