-- Delete Redisson's fair lock whoever holds it, and wake the first waiter (Redisson's force
-- unlock, §3.5: purge, DEL, `0` on the first waiter's own channel).
--
-- KEYS[1]  lock hash N   KEYS[2] queue list   KEYS[3] deadlines sorted set
-- KEYS[4]  channel prefix redisson_lock__channel:{N}
--
-- Returns {1, 0} when a lock was deleted, {0, 0} when it was free, {-1, type} for foreign data.
local bad = foreign_type(KEYS[1], 'hash') or foreign_type(KEYS[2], 'list')
  or foreign_type(KEYS[3], 'zset')
if bad then
  return bad
end
purge(KEYS[2], KEYS[3], now_ms())
if redis.call('DEL', KEYS[1]) == 1 then
  wake_head(KEYS[1], KEYS[2], KEYS[4])
  return {1, 0}
end
return {0, 0}
