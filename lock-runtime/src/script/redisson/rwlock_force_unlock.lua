-- Delete Redisson's RReadWriteLock (Layout::Redisson) whoever holds it, readers and writer, Java
-- or Rust, and wake every waiter.
--
-- KEYS[1]  the lock hash N
-- KEYS[2]  channel redisson_rwlock:{N}
--
-- Java's `readLock().forceUnlock()` acts only in read mode and `writeLock().forceUnlock()` only
-- in write mode; this acts in either, and publishes `1` (Redisson's write unlock message), which
-- wakes every waiter of every process. The readers' timeout keys are left to expire, as
-- Redisson leaves them: no field refers to them any more.
--
-- Returns {1, 0} when a lock was deleted, {0, 0} when it was free, {-1, type} for data that is
-- not a read/write lock.
local mode, bad = mode_of(KEYS[1])
if bad then
  return bad
end
if not mode then
  return {0, 0}
end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', KEYS[2], '1')
return {1, 0}
