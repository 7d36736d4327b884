-- Redisson's RFairLock (`RedissonFairLock`), shared by fair_acquire.lua, fair_release.lua and
-- fair_force_unlock.lua (prepended to each, after prelude.lua). The keys are Redisson's:
--
--   lock      N: hash, owner -> hold count (the mutex's)
--   queue     redisson_lock_queue:{N}: list of waiting owners, first come first
--   timeout   redisson_lock_timeout:{N}: sorted set, waiting owner -> deadline (epoch ms)
--   channel   redisson_lock__channel:{N}; each waiter listens on `<channel>:<its owner>`
--
-- `now` is the Redis server's clock (TIME) in epoch milliseconds. Java clients use their own
-- wall clocks for the same deadlines, so the clocks of the Redis server and of every Java
-- client must agree, as Java clients' clocks must agree among themselves.

-- The reply for a key of another type than `want` (nil when it is `want` or missing).
local function foreign_type(key, want)
  local kind = redis.call('TYPE', key)['ok']
  if kind ~= 'none' and kind ~= want then
    return {-1, kind}
  end
  return nil
end

-- Redisson's purge step: drops the waiters at the head of the queue whose deadline passed,
-- and stops at the first that has none or whose deadline is still ahead.
local function purge(queue, timeout, now)
  while true do
    local head = redis.call('LINDEX', queue, 0)
    if not head then
      return
    end
    local deadline = redis.call('ZSCORE', timeout, head)
    if deadline and tonumber(deadline) <= now then
      redis.call('ZREM', timeout, head)
      redis.call('LPOP', queue)
    else
      return
    end
  end
end

-- When the lock is free, tells the first waiter (Java or Rust) that its turn came: `0` on its
-- own channel, as Redisson's unlock does.
local function wake_head(lock, queue, channel)
  if redis.call('EXISTS', lock) == 0 then
    local head = redis.call('LINDEX', queue, 0)
    if head then
      redis.call('PUBLISH', channel .. ':' .. head, '0')
    end
  end
end

