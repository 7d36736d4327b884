-- Take Redisson's fair lock when it is free and our turn, or keep our place in its queue.
--
-- KEYS[1]  lock hash N            KEYS[2]  fencing counter (redisson_lock_token:{N})
-- KEYS[3]  queue list             KEYS[4]  deadlines sorted set
-- ARGV[1]  owner id   ARGV[2] lease ms   ARGV[3] fencing counter retention ms (0: no TTL)
-- ARGV[4]  wait: the ms this waiter adds to the deadlines behind it, and takes off them when
--          it is granted or leaves (Redisson's `threadWaitTime`)
-- ARGV[5]  place: the ms a live waiter keeps its own deadline ahead of now
--
-- Redisson's waiting acquire (§3.2): purge; grant when the lock is free and we are first or
-- nobody queues (leave the queue and the set, every remaining deadline lowered by `wait`);
-- re-take our own hold; else queue at the back with Redisson's deadline (the tail's deadline,
-- or now + the holder's PTTL, plus `wait`).
--
-- One addition for a waiter already queued: it raises (never lowers) its own deadline, so that
-- a live waiter never expires and loses its place, however long the holder keeps the lock:
-- at the head, to at least now + place (nothing lowers the head's deadline); behind another
-- waiter, to at least that waiter's deadline + wait + place, so that when the one ahead is
-- granted and lowers every deadline by its own wait (at most `wait`, Redisson's 300000 ms
-- default), ours is still `place` ahead of now. Raising our own deadline only ever lengthens
-- the deadlines chained from it, so it never costs a live Java waiter its place.
--
-- Returns {1, token} when taken, {0, ms} when not (the holder's PTTL, or until the first
-- waiter's deadline when the lock is free but not ours), {-1, type} for foreign data.
local function acquire(lock, fence, queue, timeout, owner, lease_ms, retention_ms, wait, place)
  local bad = foreign_type(lock, 'hash') or foreign_type(queue, 'list')
    or foreign_type(timeout, 'zset')
  if bad then
    return bad
  end
  wait = tonumber(wait)
  place = tonumber(place)
  local now = now_ms()
  purge(queue, timeout, now)
  local held = redis.call('EXISTS', lock) == 1
  local head = redis.call('LINDEX', queue, 0)
  local mine = held and redis.call('HEXISTS', lock, owner) == 1
  if mine or (not held and (not head or head == owner)) then
    local token, reply = next_token(fence, owner, retention_ms)
    if not token then
      return reply
    end
    if not held then
      redis.call('LPOP', queue)
      redis.call('ZREM', timeout, owner)
      for _, waiter in ipairs(redis.call('ZRANGE', timeout, 0, -1)) do
        redis.call('ZINCRBY', timeout, string.format('%d', -wait), waiter)
      end
    end
    -- A Rust hold is one count: a retried acquire (same owner) re-takes it, idempotently.
    redis.call('HSET', lock, owner, 1)
    redis.call('PEXPIRE', lock, lease_ms)
    return {1, token}
  end

  local deadline = redis.call('ZSCORE', timeout, owner)
  if deadline then
    local waiters = redis.call('LRANGE', queue, 0, -1)
    local at = nil
    for i, waiter in ipairs(waiters) do
      if waiter == owner then
        at = i
        break
      end
    end
    if at then
      local floor = now + place
      if at > 1 then
        local ahead = redis.call('ZSCORE', timeout, waiters[at - 1])
        if ahead then
          floor = math.max(floor, tonumber(ahead) + wait + place)
        end
      end
      if tonumber(deadline) < floor then
        redis.call('ZADD', timeout, string.format('%d', floor), owner)
      end
    else
      -- In the set but not the queue (nothing of Redisson's leaves it so): queue again.
      redis.call('ZREM', timeout, owner)
      deadline = nil
    end
  end
  if not deadline then
    local last = redis.call('LINDEX', queue, -1)
    local ttl = nil
    if last and last ~= owner then
      local score = redis.call('ZSCORE', timeout, last)
      if score then
        ttl = tonumber(score) - now
      end
    end
    if not ttl then
      ttl = redis.call('PTTL', lock)
    end
    if redis.call('ZADD', timeout, string.format('%d', ttl + wait + now), owner) == 1 then
      redis.call('RPUSH', queue, owner)
    end
  end

  if held then
    return {0, redis.call('PTTL', lock)}
  end
  -- Free, but another waiter's turn: its unlock message went to it.
  local first = redis.call('ZSCORE', timeout, head)
  if first then
    return {0, math.max(1, math.min(tonumber(first) - now, place))}
  end
  -- A head without a deadline (written by something else): the purge never drops it, so
  -- look again when our place needs refreshing, not every millisecond.
  return {0, tonumber(place)}
end

return acquire(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5])
