-- Release our hold of Redisson's fair lock, or leave its queue; then wake the first waiter.
--
-- KEYS[1]  lock hash N   KEYS[2] queue list   KEYS[3] deadlines sorted set
-- KEYS[4]  channel prefix redisson_lock__channel:{N} (a waiter listens on `<prefix>:<owner>`)
-- ARGV[1]  owner id      ARGV[2] wait (as given to fair_acquire.lua)
--
-- A holder: Redisson's unlock (§3.4) for a hold of one count: purge, delete our field (and so
-- the hash), publish `0` on the first waiter's own channel. The waiter is not popped: it
-- leaves the queue when it takes the lock.
--
-- Not a holder (a waiter that timed out or was cancelled): Redisson's give-up (§3.3): every
-- waiter behind us gets `wait` off its deadline, and we leave the set and the queue. One
-- addition: if we were first and the lock is free, the new first waiter is told at once
-- (Redisson's give-up publishes nothing, so it would wait for its own retry).
--
-- Returns {1, 0} when released, {0, 0} when we did not hold it (our place is gone either
-- way), {-1, type} for foreign data.
local function release(lock, queue, timeout, channel, owner, wait)
  local bad = foreign_type(lock, 'hash') or foreign_type(queue, 'list')
    or foreign_type(timeout, 'zset')
  if bad then
    return bad
  end
  purge(queue, timeout, now_ms())
  if redis.call('HDEL', lock, owner) == 1 then
    wake_head(lock, queue, channel)
    return {1, 0}
  end
  local waiters = redis.call('LRANGE', queue, 0, -1)
  local behind = false
  for _, waiter in ipairs(waiters) do
    if behind then
      redis.call('ZINCRBY', timeout, string.format('%d', -tonumber(wait)), waiter)
    elseif waiter == owner then
      behind = true
    end
  end
  redis.call('ZREM', timeout, owner)
  redis.call('LREM', queue, 0, owner)
  -- If the lock is free: we were first, or we were no waiter at all but a holder whose lease
  -- ended before this release (Redisson's unlock wakes the first waiter then too, §3.4 step
  -- 3). A waiter further back leaving changes nobody's turn.
  if waiters[1] == owner or not behind then
    wake_head(lock, queue, channel)
  end
  return {0, 0}
end

return release(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1], ARGV[2])
