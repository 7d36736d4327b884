-- Release our hold of a side of Redisson's RReadWriteLock (Layout::Redisson). Redisson's read
-- and write unlock steps (redisson-wire.md §4.2 and §4.5) without its unlock latch (a latch
-- makes Java's retried unlock idempotent; a retried release of ours finds its hold gone and
-- says so, which the client reads as done).
--
-- KEYS[1]  the lock hash N
-- KEYS[2]  channel redisson_rwlock:{N}
-- KEYS[3]  (read side) this reader's timeout keys' base `{N}:<owner>:rwlock_timeout`
-- KEYS[4]  (read side) every reader's timeout key prefix: `{N}`, or N when it has its own tag
-- ARGV[1]  owner id (a writer's ends in `:write`)
-- ARGV[2]  'read' or 'write'
--
-- What it publishes is what Java waiters listen for: `0` when a read unlock freed the lock (one
-- waiter per process wakes), `1` when a write unlock did (every waiter wakes: readers can all
-- go). A writer that still holds reads of its own (a Java downgrade) leaves the lock in read
-- mode and publishes nothing, as Redisson does.
--
-- Returns {1, 0} when released, {0, 0} when this owner held nothing, {-1, type} for data that
-- is not a read/write lock.

-- The longest PTTL of the timeout keys of every reader in `lock` (-3 when there are none):
-- `<prefix>:<field>:rwlock_timeout:<k>` for k = the field's count down to 1. A writer's field
-- has none (its probe finds no key), and neither does `mode` (not a number).
local function longest_read_hold(lock, prefix)
  local longest = -3
  for _, field in ipairs(redis.call('HKEYS', lock)) do
    local count = tonumber(redis.call('HGET', lock, field))
    if count then
      for k = count, 1, -1 do
        local ttl = redis.call('PTTL', prefix .. ':' .. field .. ':rwlock_timeout:' .. k)
        if ttl > longest then
          longest = ttl
        end
      end
    end
  end
  return longest
end

local function release_read(lock, channel, timeouts, prefix, owner, mode)
  local held = redis.call('HGET', lock, owner)
  if not held then
    return {0, 0}
  end
  if not string.match(held, '^%d+$') then
    return {-1, 'hash'}
  end
  local left = redis.call('HINCRBY', lock, owner, -1)
  if left <= 0 then
    redis.call('HDEL', lock, owner)
  end
  -- The hold just released is the highest-numbered one.
  redis.call('DEL', timeouts .. ':' .. (left + 1))
  if redis.call('HLEN', lock) > 1 then
    -- Others still hold: the hash lives as long as the longest read hold left, or, in write
    -- mode, as the writer's lease already says.
    local longest = longest_read_hold(lock, prefix)
    if longest > 0 then
      redis.call('PEXPIRE', lock, longest)
      return {1, 0}
    end
    if mode == 'write' then
      return {1, 0}
    end
  end
  -- Free (or only readers whose every timeout key has ended are left, which Redisson counts
  -- as free too).
  redis.call('DEL', lock)
  redis.call('PUBLISH', channel, '0')
  return {1, 0}
end

local function release_write(lock, channel, owner, mode)
  local held = mode == 'write' and redis.call('HGET', lock, owner)
  if not held then
    return {0, 0}
  end
  if not string.match(held, '^%d+$') then
    return {-1, 'hash'}
  end
  local left = redis.call('HINCRBY', lock, owner, -1)
  if left > 0 then
    -- (Never ours: each of our acquisitions holds once.)
    return {1, 0}
  end
  redis.call('HDEL', lock, owner)
  if redis.call('HLEN', lock) == 1 then
    redis.call('DEL', lock)
    redis.call('PUBLISH', channel, '1')
  else
    -- The writer's own read holds remain: the lock goes on in read mode.
    redis.call('HSET', lock, 'mode', 'read')
  end
  return {1, 0}
end

local function release(lock, channel, timeouts, prefix, owner, side)
  local mode, bad = mode_of(lock)
  if bad then
    return bad
  end
  if not mode then
    -- Gone already (its lease ended, or it was force-unlocked). Redisson publishes anyway, in
    -- case a waiter missed the unlock; so do we, with the side's message.
    if side == 'write' then
      redis.call('PUBLISH', channel, '1')
    else
      redis.call('PUBLISH', channel, '0')
    end
    return {0, 0}
  end
  if side == 'write' then
    return release_write(lock, channel, owner, mode)
  end
  return release_read(lock, channel, timeouts, prefix, owner, mode)
end

return release(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1], ARGV[2])
