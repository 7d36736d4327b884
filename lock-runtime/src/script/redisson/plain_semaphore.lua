-- Redisson's RSemaphore: every operation a Rust handle needs, written from its on-Redis
-- contract (see semaphore.rs). Its permits are anonymous: Redis records only how many are
-- available, never who holds them, so nothing here expires or can be taken back.
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

-- Java's tryAcquire(n): {1, token} when taken, {0, -1} when too few are free (no lease to
-- wait for: the waiter polls as well as listening), {3, capacity} when more than the handle's
-- capacity is asked for.
local function acquire(count, channel, fence, owner, retention_ms, capacity)
  local bad = check_count(count)
  if bad then
    return bad
  end
  local wanted = permits_of(owner)
  if wanted > tonumber(capacity) then
    return {3, tonumber(capacity)}
  end
  ensure(count, channel, capacity)
  if tonumber(redis.call('GET', count)) < wanted then
    return {0, -1}
  end
  local token, reply = next_token(fence, owner, retention_ms)
  if not token then
    return reply
  end
  redis.call('DECRBY', count, wanted)
  return {1, token}
end

-- Java's release(n): INCRBY, then the new count on the channel.
local function release(count, channel, owner)
  local bad = check_count(count)
  if bad then
    return bad
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
  local token = false
  local counter = redis.pcall('GET', fence)
  if type(counter) == 'string' then
    token = string.match(counter, '^(%-?%d+)') or false
  end
  local subscribers = redis.call('PUBSUB', 'NUMSUB', channel)[2]
  return {redis.call('TYPE', count)['ok'], 0, {}, 0, token, 0, 0, subscribers, false}
end

local op = ARGV[1]
if op == 'acquire' then
  return acquire(KEYS[1], KEYS[2], KEYS[3], ARGV[2], ARGV[4], ARGV[5])
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
