-- Redisson's RSemaphore: every operation a Rust handle needs, written from its on-Redis
-- contract (see semaphore.rs). Its permits are anonymous: Redis records only how many are
-- available, never who holds them, so nothing here expires or can be taken back.
--
-- A Rust hold also writes a marker of its own, `{N}:<owner>` (`N:<owner>` when N has its own
-- tag; Java never reads it), with the hold's lease, renewed by the watchdog. It makes the
-- Rust side's retries exact: an acquire that finds its marker re-takes nothing, and a release
-- gives the permits back only when it deletes the marker, so a retried, cancelled or repeated
-- release (the watchdog's at `max_hold`, then the guard's) never adds permits twice. A hold
-- whose marker expired (its process froze longer than the lease) keeps its permits taken, as
-- a holder that died does. So does a cancelled acquire whose request took the permits (DECRBY)
-- while Redis was unreachable for longer than the lease: its clean-up is retried in the
-- background only until that lease ends, and finds the marker gone after it.
--
-- KEYS[1]  N: the available permits, a decimal string
-- KEYS[2]  redisson_sc:{N}: the channel; a release publishes the new available count (a Java
--          acquire() waits for it with no timeout)
-- KEYS[3]  redisson_lock_token:{N}: the fencing counter (no TTL)
-- ARGV[1]  the operation: acquire, release, free, inspect (force, capacity and set are
--          refused before anything is sent)
--
-- Replies are {code, detail} as this crate's own scripts' ({-1, type} for foreign data,
-- nothing written), except inspect's, which has inspect.lua's shape.

local function permits_of(owner)
  return tonumber(string.match(owner, '#(%d+)$') or '1')
end

-- The marker of `owner`'s hold (see above), in N's slot.
local function marker(count, owner)
  if string.find(count, '{', 1, true) then
    return count .. ':' .. owner
  end
  return '{' .. count .. '}:' .. owner
end

-- Java's tryAcquire(n): {1, token} when taken (or already ours: nothing more is taken),
-- {0, -1} when too few are free (no lease to wait for: the waiter polls as well as
-- listening), {3, capacity} when more than the handle's capacity is asked for.
local function acquire(count, channel, fence, owner, lease_ms, retention_ms, capacity)
  local bad = check_count(count)
  if bad then
    return bad
  end
  local wanted = permits_of(owner)
  if wanted > tonumber(capacity) then
    return {3, tonumber(capacity)}
  end
  local hold = marker(count, owner)
  local mine = redis.call('EXISTS', hold) == 1
  if not mine then
    ensure(count, channel, capacity)
    if tonumber(redis.call('GET', count)) < wanted then
      return {0, -1}
    end
  end
  local token, reply = next_token(fence, owner, retention_ms)
  if not token then
    return reply
  end
  if not mine then
    redis.call('DECRBY', count, wanted)
  end
  redis.call('SET', hold, wanted, 'PX', lease_ms)
  return {1, token}
end

-- Java's release(n): INCRBY, then the new count on the channel; only once per hold (the
-- marker), {0, 0} when it was given back already.
local function release(count, channel, owner)
  local bad = check_count(count)
  if bad then
    return bad
  end
  if redis.call('DEL', marker(count, owner)) == 0 then
    return {0, 0}
  end
  local value = redis.call('INCRBY', count, permits_of(owner))
  redis.call('PUBLISH', channel, value)
  return {1, 0}
end

local function free(count, channel, capacity)
  local bad = check_count(count)
  if bad then
    return bad
  end
  ensure(count, channel, capacity)
  return {1, math.max(0, tonumber(redis.call('GET', count)))}
end

-- inspect.lua's reply shape: no holders are known; `capacity` is the available count.
local function inspect(count, channel, fence)
  local token = last_token(fence)
  local subscribers = redis.call('PUBSUB', 'NUMSUB', channel)[2]
  return {redis.call('TYPE', count)['ok'], 0, {}, 0, token, 0, 0, subscribers, false}
end

local op = ARGV[1]
if op == 'acquire' then
  return acquire(KEYS[1], KEYS[2], KEYS[3], ARGV[2], ARGV[3], ARGV[4], ARGV[5])
elseif op == 'release' then
  return release(KEYS[1], KEYS[2], ARGV[2])
elseif op == 'free' then
  return free(KEYS[1], KEYS[2], ARGV[2])
elseif op == 'inspect' then
  return inspect(KEYS[1], KEYS[2], KEYS[3])
elseif op == 'force' then
  return {0, 0}
end
return redis.error_reply('ERR a plain RSemaphore has no ' .. op .. ' operation')
