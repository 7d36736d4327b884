-- Take a fair lock when it is free and our turn has come, or re-take our own (idempotent).
--
-- KEYS[1]  lock hash (as the mutex's: field = owner id, value = hold count)
-- KEYS[2]  fencing counter
-- KEYS[3]  queue: a sorted set, member = waiting owner id, score = when it first asked (server
--          microseconds), so the order survives its refreshes
-- KEYS[4]  places: a sorted set, member = waiting owner id, score = the end of its place
-- ARGV[1]  owner id
-- ARGV[2]  lease in milliseconds
-- ARGV[3]  the fencing argument: the counter's retention in milliseconds, and behind Sentinel
--          `:<epoch>` (see "Fencing epochs" in prelude.lua)
-- ARGV[4]  how long a place lasts without being refreshed, in milliseconds
--
-- A waiter that cannot have the lock takes (or refreshes) its place at the back of the queue.
-- The queue heals itself: a waiter whose place ended (it died, or its process froze) is
-- dropped by the next script that looks, so it blocks the others for one place at most; a
-- waiter that gives up leaves at once (see fair_release.lua).
--
-- Returns {1, token} when taken, {0, ms} when not (ms: the holder's remaining lease, or until
-- the place of the waiter whose turn it is ends), {-1, type} for foreign data.

local function acquire(lock, fence, queue, places, owner, lease_ms, retention_ms, place_ms)
  local bad = foreign(redis.pcall('ZSCORE', queue, owner), queue)
    or foreign(redis.pcall('ZSCORE', places, owner), places)
  if bad then
    return bad
  end
  local kind = redis.call('TYPE', lock)['ok']
  if kind ~= 'none' and kind ~= 'hash' then
    return {-1, kind}
  end
  local now = now_ms()
  local first = queue_head(queue, places, now)
  local mine = kind == 'hash' and redis.call('HEXISTS', lock, owner) == 1
  if mine or (kind == 'none' and (not first or first == owner)) then
    local token, reply = grant(lock, fence, owner, lease_ms, retention_ms)
    if not token then
      return reply
    end
    redis.call('ZREM', queue, owner)
    redis.call('ZREM', places, owner)
    return {1, token}
  end
  redis.call('ZADD', queue, 'NX', clock_us(), owner)
  redis.call('ZADD', places, now + tonumber(place_ms), owner)
  -- Every place ends within `place_ms` from now, so the keys can go with the last of them.
  redis.call('PEXPIRE', queue, place_ms)
  redis.call('PEXPIRE', places, place_ms)
  if kind == 'hash' then
    return {0, redis.call('PTTL', lock)}
  end
  -- Free, but another waiter's turn: until its place ends at the latest.
  local ends = redis.call('ZSCORE', places, first)
  return {0, math.max(1, tonumber(ends) - now)}
end

return acquire(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1], ARGV[2], ARGV[3], ARGV[4])
