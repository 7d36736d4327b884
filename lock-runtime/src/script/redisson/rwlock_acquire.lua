-- Take the read or the write side of Redisson's RReadWriteLock (Layout::Redisson), or re-take
-- our own hold (idempotent). Redisson's read and write acquire steps (redisson-wire.md §4.1 and
-- §4.4), with our owner ids, the fencing counter, and the replies of every acquire script.
--
-- KEYS[1]  the lock hash N: field `mode` = 'read' | 'write'; a reader's field <owner> and the
--          writer's field <owner>:write, each -> hold count; its TTL covers every hold
-- KEYS[2]  fencing counter (redisson_lock_token:{N})
-- KEYS[3]  (read side) this reader's timeout keys' base `{N}:<owner>:rwlock_timeout`: hold k
--          is the key `<base>:<k>`, the string `1` with the hold's lease as TTL
-- ARGV[1]  owner id: `<client uuid>:<n>` for a reader, `<client uuid>:<n>:write` for a writer
-- ARGV[2]  lease in milliseconds
-- ARGV[3]  fencing counter retention in milliseconds (0: kept for ever)
-- ARGV[4]  'read' or 'write'
--
-- Each acquisition of ours has an owner id of its own and holds once (re-entry happens in the
-- client's scope, without a round trip), so a hold we find under our own id is a retried
-- attempt of this acquisition: it is re-armed, not counted twice. Java's holds count as
-- Redisson counts them.
--
-- No writer preference, as in Redisson: a reader gets in whenever the lock is in read mode.
--
-- Returns {1, token} when taken, {0, pttl} when not, {-1, type} when the key holds data that is
-- not a read/write lock in Redisson's layout (another type; a hash without a valid `mode`, such
-- as an RLock's; a hold count that is not a number). Nothing is written then.

local function read(lock, fence, timeouts, owner, lease_ms, retention_ms, mode)
  local held = redis.call('HGET', lock, owner)
  if held and not string.match(held, '^%d+$') then
    return {-1, 'hash'}
  end
  -- Redisson's rule: in read mode, or in write mode when the writer is this owner (its
  -- downgrade; our writers re-enter reads in their scope, so only Java's do this).
  if mode == 'write' and redis.call('HEXISTS', lock, owner .. ':write') == 0 then
    return {0, redis.call('PTTL', lock)}
  end
  local token, reply = next_token(fence, owner, retention_ms)
  if not token then
    return reply
  end
  if not mode then
    redis.call('HSET', lock, 'mode', 'read')
  end
  if held then
    -- Our own hold: re-arm every hold's timeout key.
    for k = tonumber(held), 1, -1 do
      redis.call('SET', timeouts .. ':' .. k, 1, 'PX', lease_ms)
    end
  else
    local k = redis.call('HINCRBY', lock, owner, 1)
    redis.call('SET', timeouts .. ':' .. k, 1, 'PX', lease_ms)
  end
  -- The hash lives as long as its longest hold: max(PTTL, lease), as Redisson sets it.
  extend(lock, lease_ms)
  return {1, token}
end

local function write(lock, fence, owner, lease_ms, retention_ms, mode)
  if mode and not (mode == 'write' and redis.call('HEXISTS', lock, owner) == 1) then
    return {0, redis.call('PTTL', lock)}
  end
  local token, reply = next_token(fence, owner, retention_ms)
  if not token then
    return reply
  end
  if not mode then
    redis.call('HSET', lock, 'mode', 'write', owner, 1)
  end
  -- (A retried attempt of ours re-arms the lease; Redisson's own re-entry adds to it instead.)
  redis.call('PEXPIRE', lock, lease_ms)
  return {1, token}
end

local function acquire(lock, fence, timeouts, owner, lease_ms, retention_ms, side)
  local mode, bad = mode_of(lock)
  if bad then
    return bad
  end
  if side == 'write' then
    return write(lock, fence, owner, lease_ms, retention_ms, mode)
  end
  return read(lock, fence, timeouts, owner, lease_ms, retention_ms, mode)
end

return acquire(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2], ARGV[3], ARGV[4])
