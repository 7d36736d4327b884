-- Raises `owner`'s deadline to `floor` if it is lower, and every deadline behind it in the
-- queue by as much, so that the differences Redisson chains deadlines by are kept. Looks
-- through the queue only when it raises (at the head, or second behind a Java head): a waiter
-- deeper in the queue is at least one `wait` further than the one ahead of it, so O(1).
-- A waiter in the set but not in the queue (nothing of Redisson's leaves it so) queues again.
local function raise(queue, timeout, owner, deadline, floor)
  if deadline >= floor then
    return
  end
  local by = string.format('%d', floor - deadline)
  local behind = false
  for _, waiter in ipairs(redis.call('LRANGE', queue, 0, -1)) do
    if behind then
      if redis.call('ZSCORE', timeout, waiter) then
        redis.call('ZINCRBY', timeout, by, waiter)
      end
    elseif waiter == owner then
      behind = true
    end
  end
  if not behind then
    redis.call('RPUSH', queue, owner)
  end
  redis.call('ZADD', timeout, string.format('%d', floor), owner)
end

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
-- One addition: a live waiter raises (never lowers) its own deadline, at each attempt, to at
-- least now + wait + place, and every deadline behind it by as much (`raise`). So it never
-- expires and loses its place, however long the holder keeps the lock: at the head; and
-- second behind a Java head, whose grant lowers every deadline by its own wait (at most `wait`,
-- Redisson's 300000 ms default) and leaves ours still `place` ahead of now. Moving everyone
-- behind by as much keeps the differences Redisson chains deadlines by (each waiter `wait`
-- after the one ahead), so when we are granted or leave and take `wait` off them, every Java
-- waiter behind keeps at least the deadline it would have had behind a Java waiter: a live
-- Rust waiter never costs a Java waiter its place. And a waiter that dies reaches the head
-- with about the deadline of the last live waiter granted ahead of it (each grant takes off
-- what each link added): it stalls the queue at most about wait + place (305 s), wherever it
-- was in the queue, as a dead Java `lock()` waiter does (300 s).
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
    deadline = ttl + wait + now
    redis.call('ZADD', timeout, string.format('%d', deadline), owner)
    redis.call('RPUSH', queue, owner)
  end
  raise(queue, timeout, owner, tonumber(deadline), now + wait + place)

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
